"""Java-style ``.properties`` files, as Kafka's configs and tools' ``--command-config`` read them."""

from __future__ import annotations


class PropertiesError(ValueError):
    """A properties file cannot be parsed."""


def parse_properties(text: str) -> dict[str, str]:
    """Java properties, the subset config files use: key=value or key: value, # and ! comments."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, value = line.split(sep, 1)
                out[key.strip()] = value.strip()
                break
        else:
            raise PropertiesError(f"cannot parse config line {raw!r}")
    return out
