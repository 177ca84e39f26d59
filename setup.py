"""Build hook for the one compiled module, proto._codec (the record validator and CRC-32C).

Everything else is in pyproject.toml. The extension is optional: where no C compiler exists the
install still succeeds and proto.record_batch falls back to its pure-Python twin.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("proto._codec", ["proto/_codec.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"])])
