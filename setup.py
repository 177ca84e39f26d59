"""Build hook for the compiled modules: proto._codec (the record validator and CRC-32C) and
proto._columnar (fetched batches decoded into columns, for the consumer and the Spark reader).

Everything else is in pyproject.toml. The extensions are optional: where no C compiler exists the
install still succeeds and proto.record_batch / proto.columnar fall back to their pure-Python twins.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("proto._codec", ["proto/_codec.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]),
                   # The columnar decoder (consumer and Spark side); proto.columnar is its pure-Python twin.
                   Extension("proto._columnar", ["proto/_columnar.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"])])
