# Builds torchneuron._C: the C++ glue (csrc/torch) linked with the C runtime and kernel library
# (build/libneuron.a, built by `make clib`).  Install with `pip install --no-build-isolation -e .`
# so the extension compiles against the torch already installed (torch==2.13.0).
import glob
import os
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


class Build(BuildExtension):
    def run(self):
        subprocess.check_call(["make", "-C", ROOT, "clib"])
        super().run()


ext = CppExtension(
    name="torchneuron._C",
    sources=sorted(glob.glob("csrc/torch/*.cpp")),
    include_dirs=[os.path.join(ROOT, "csrc/runtime"), os.path.join(ROOT, "csrc/kernels"), os.path.join(ROOT, "csrc/ccl")],
    extra_objects=[os.path.join(ROOT, "build/libneuron.a")],
    # the graph compiler's entry points (torchneuron.compile calls them through ctypes): pull its
    # objects out of the archive although no C++ code references them
    extra_link_args=["-Wl,-u,nc_compile", "-Wl,-u,nc_prelude", "-Wl,-u,nc_rt_table"],
    extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter", "-Wno-sign-compare"],
    libraries=["m"],
)

setup(
    name="torchneuron",
    version="0.1.0",
    packages=["torchneuron", "torchneuron.compile", "torchneuron.kernel", "torchneuron.kernel.library", "torch_neuronx"],
    # the C header user kernels compile against at run time (torchneuron.kernel)
    package_data={"torchneuron.kernel": ["include/*.h"], "torchneuron.kernel.library": ["*.c"]},
    ext_modules=[ext],
    cmdclass={"build_ext": Build.with_options(use_ninja=True)},
    entry_points={
        "torch.backends": ["torchneuron = torchneuron:_autoload"],
        "torch_dynamo_backends": ["neuron = torchneuron.compile:backend"],
        "console_scripts": ["torchneuron = torchneuron.cli:main"],
    },
)
