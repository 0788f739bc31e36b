"""The one error type for bad input: it names the file, the field and the first bad row."""

from __future__ import annotations


class FormatError(ValueError):
    """Bad input data or metadata.

    ``file``, ``field`` and ``row`` locate the problem; ``row`` is the first bad row
    (0-based data row within ``file`` unless the message says "line").
    """

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None,
                 row: int | None = None):
        self.message, self.file, self.field, self.row = message, file, field, row
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.file is not None:
            where.append(str(self.file))
        if self.field is not None:
            where.append(f"field '{self.field}'")
        if self.row is not None:
            where.append(f"row {self.row}")
        return f"{', '.join(where)}: {self.message}" if where else self.message

    def __reduce__(self):  # survives pickling between Dask workers and the client
        return (_rebuild, (self.message, self.file, self.field, self.row))


def _rebuild(message, file, field, row):
    return FormatError(message, file=file, field=field, row=row)
