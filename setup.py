"""Builds wdscpp's extension, wdscpp._wdscpp, with the project's own CMake build.

pyproject.toml holds the package's metadata; this file only tells setuptools how to make the
extension: configure the source tree into build-python/ (beside build/, so that ccache, which
the top-level CMakeLists sets up, finds what a build/ of the same flags compiled), build the one
target _wdscpp (with libwds linked in statically) for the interpreter running pip, and copy it
into the package. WDS_CMAKE_ARGS adds CMake arguments (e.g. -DCMAKE_BUILD_TYPE=RelWithDebInfo);
CMAKE_BUILD_PARALLEL_LEVEL sets the build's jobs.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(wds\s+VERSION\s+([0-9][0-9.]*)", text)
    if not match:
        raise RuntimeError("no VERSION in CMakeLists.txt's project()")
    return match.group(1)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = ROOT / "build-python"
        args = [
            "cmake", "-S", str(ROOT), "-B", str(build),
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DWDS_BUILD_PYTHON=ON", "-DWDS_BUILD_TESTS=OFF", "-DWDS_BUILD_BENCH=OFF",
            "-DWDS_BUILD_TOOLS=OFF", "-DWDS_BUILD_EXAMPLES=OFF", "-DWDS_BUILD_SERVICE=OFF",
            "-DWDS_INSTALL=OFF",
        ]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        args += shlex.split(os.environ.get("WDS_CMAKE_ARGS", ""))
        subprocess.run(args, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build), "--target", "_wdscpp", "-j", jobs],
                       check=True)
        built = sorted((build / "python" / "wdscpp").glob("_wdscpp*.so"))
        if not built:
            raise RuntimeError(f"the CMake build made no _wdscpp module in {build}/python/wdscpp")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[-1], target)


setup(
    version=project_version(),
    ext_modules=[CMakeExtension("wdscpp._wdscpp")],
    cmdclass={"build_ext": CMakeBuild},
    # Not build/: that is the CMake build of the tree (README).
    options={"build": {"build_base": "build-pip"}, "egg_info": {"egg_base": "build-pip"}},
)
