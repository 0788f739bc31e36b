"""The bundled trainer: reads only the partitioned format (``formats.partitioned``).

Never imports ``pipeline`` or ``dispatch``: a training machine needs only the format.
"""
