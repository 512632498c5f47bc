"""The optional C extension of the step handshake (vecsample/_wire/_native.c).

Everything else is in pyproject.toml. ``optional=True``: a machine without a C compiler (or
without Linux's futex, which the C uses) still installs vecsample, with the pure-Python
handshake; setuptools prints that the optional extension failed to build, and vecsample says so
once when a sampler starts (docs/architecture.md, "The native path").
"""

import platform
import sys

from setuptools import Extension, setup

NATIVE = sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")

setup(ext_modules=[
    Extension("vecsample._wire._native", ["vecsample/_wire/_native.c"], optional=True,
              extra_compile_args=["-O2", "-std=gnu11"]),
] if NATIVE else [])
