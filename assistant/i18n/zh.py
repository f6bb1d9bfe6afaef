"""Chinese interface strings (keys as in en.py; a missing key falls back to English)."""

STRINGS: dict[str, str] = {
}
