"""The optional C extension of the step handshake (vecsample/_wire/_native.c).

Everything else is in pyproject.toml. ``optional=True``: a machine without a C compiler (or
without Linux's futex, which the C uses) still installs vecsample, with the pure-Python
handshake; setuptools prints that the optional extension failed to build, and vecsample says so
once when a sampler starts (docs/architecture.md, "The native path").
"""

import hashlib
import platform
import sys
from pathlib import Path

from setuptools import Extension, setup

NATIVE = sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")
SOURCE = "vecsample/_wire/_native.c"
# The build carries the digest of the source it was built from (handshake.native_digest): a
# checkout updated after `pip install -e .` keeps the old .so, which handshake.py then declines
# and says how to rebuild, instead of failing on a function the old build lacks.
DIGEST = hashlib.sha256(Path(SOURCE).read_bytes()).hexdigest()[:16]

setup(ext_modules=[
    Extension("vecsample._wire._native", [SOURCE], optional=True,
              define_macros=[("VECSAMPLE_SOURCE_DIGEST", f'"{DIGEST}"')],
              extra_compile_args=["-O2", "-std=gnu11"]),
] if NATIVE else [])
