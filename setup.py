"""Package metadata lives in setup.cfg; this file adds the OPTIONAL `_fastdecode` C extension and puts the
default settings (conf/) into built wheels.

The extension (pipelines/decoding/_fastdecode.c and the sources it is built with) speeds up the segment readers
(`pipelines.decoding`) and the rows the loaders read (`pipelines.coordinator.decoded.group_rows`); the pure-Python
path is the reference and the fallback, so a failed compile only prints a warning and never fails the install.
"""
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when an optional extension cannot be built."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - compiler missing, headers missing, ...
            self._warn(e)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self._warn(e, ext.name)

    @staticmethod
    def _warn(err, name="extensions"):
        print(f"WARNING: optional C extension {name} not built ({err}); the pure-Python decoder will be used")


class BuildPyWithConf(build_py):
    """build_py that also copies conf/**/*.yml to pipelines/_conf/ in the build: an installed wheel has no
    checkout beside it, and pipelines/config.py reads that copy then. conf/ stays the only committed copy."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads the checkout's conf/ directly
            return
        src = Path(__file__).resolve().parent / "conf"
        files = sorted(src.rglob("*.yml"))
        if not files:
            raise SystemExit(f"no settings under {src}: a wheel without conf/ cannot run")
        for f in files:
            dest = Path(self.build_lib) / "pipelines" / "_conf" / f.relative_to(src)
            self.mkpath(str(dest.parent))
            self.copy_file(str(f), str(dest))


setup(
    ext_modules=[
        Extension(
            "pipelines.decoding._fastdecode",
            sources=["pipelines/decoding/_fastdecode.c", "pipelines/decoding/_native_codecs.c",
                     "pipelines/decoding/_python_rows.c"],
            depends=["pipelines/decoding/_native_codecs.h", "pipelines/decoding/_python_rows.h"],
            libraries=["dl"],  # dlopen: in libc since glibc 2.34, in libdl before (a stub of it after)
            extra_compile_args=["-O2"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyWithConf},
)
