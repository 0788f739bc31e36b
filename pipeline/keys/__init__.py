"""Keys of any type -> node IDs, out of core (``job.map_keys``), and back (``lookup``)."""
