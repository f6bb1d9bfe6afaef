"""Build hook: the wheel carries lf-assistant's own data/, examples/, skills/ and docs/ as the package
lf_assistant_resources (engine.resources finds them there; a checkout reads the folders in place)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

RESOURCES = ("data", "examples", "skills", "docs")
PACKAGE = "lf_assistant_resources"


class BuildWithResources(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / PACKAGE
        for name in RESOURCES:
            source = Path(name)
            if source.is_dir():
                shutil.copytree(source, target / name, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))
        (target / "__init__.py").write_text('"""lf-assistant\'s shipped data, examples, skills and docs."""\n')


setup(cmdclass={"build_py": BuildWithResources})
