"""Package metadata lives in setup.cfg; this file only adds the OPTIONAL `_fastdecode` C extension.

The extension (pipelines/decoding/_fastdecode.c) speeds up `pipelines.decoding.columnar`; the pure-Python path
is the reference and the fallback, so a failed compile only prints a warning and never fails the install.
"""
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


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


setup(
    ext_modules=[
        Extension(
            "pipelines.decoding._fastdecode",
            sources=["pipelines/decoding/_fastdecode.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
