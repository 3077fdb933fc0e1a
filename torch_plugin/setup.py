"""pip install for torch_accl, built against the torch of the interpreter that runs pip:

    python3 -m pip install --no-build-isolation <ACCL source>/torch_plugin

(--no-build-isolation: the build must see the installed torch; on Debian's
system python add --break-system-packages or use a venv with
--system-site-packages.) Builds ACCL with the project's CMake, with torch's
C++ ABI, and packages the extension with libaccl and the backend modules in
torch_accl/lib. ACCL_BUILD_DIR chooses the CMake build directory."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        for line in f:
            if line.startswith("project(ACCL VERSION"):
                return line.split()[2]
    return "0.0.0"


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        import torch
        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
        build = os.environ.get("ACCL_BUILD_DIR") or os.path.join(ROOT, f"build-torch_accl-abi{abi}")
        cfg = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", f"-DACCL_PYTHON={sys.executable}",
               "-DACCL_WITH_TORCH=ON", "-DACCL_BUILD_TESTS=OFF",
               f"-DCMAKE_CXX_FLAGS=-D_GLIBCXX_USE_CXX11_ABI={abi}"]
        if abi == 0:
            # The system's gloo is built with the C++11 ABI; its C++ API cannot link into an ABI-0 build.
            cfg.append("-DACCL_WITH_GLOO=OFF")
        subprocess.check_call(cfg)
        subprocess.check_call(["cmake", "--build", build, "-j", str(os.cpu_count() or 1), "--target", "torch_accl",
                               "accl-backend-accl"] + (["accl-backend-gloo"] if abi == 1 and glob.glob(
                                   os.path.join(build, "backends", "CMakeFiles", "accl-backend-gloo.dir")) else []))
        subprocess.call(["cmake", "--build", build, "-j", str(os.cpu_count() or 1)])  # the other backends, best effort
        pkg = os.path.join(self.build_lib, "torch_accl")
        os.makedirs(os.path.join(pkg, "lib"), exist_ok=True)
        for f in glob.glob(os.path.join(build, "python", "torch_accl", "_C*.so")):
            shutil.copy2(f, pkg)
        for f in glob.glob(os.path.join(build, "lib", "libaccl*.so*")):
            dst = os.path.join(pkg, "lib", os.path.basename(f))
            if os.path.islink(f):
                if os.path.lexists(dst):
                    os.remove(dst)
                os.symlink(os.readlink(f), dst)
            else:
                shutil.copy2(f, dst)


setup(
    name="torch_accl",
    version=project_version(),
    description="ACCL collectives as a torch.distributed backend (backend='accl')",
    packages=["torch_accl"],
    cmdclass={"build_py": BuildWithCMake},
    python_requires=">=3.8",
    zip_safe=False,
)
