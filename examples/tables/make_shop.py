"""Write the shop tables that ``shop.yaml`` describes: users (UUID keys, CSV), items (ASIN
keys, Parquet with a list column), purchase events (one CSV per day) and co-views (Parquet).

A user's segment follows their taste, and users buy items whose embedding is near their
taste, so a model learns segments from features and neighbours.
``python make_shop.py OUT [USERS]``.
"""

from __future__ import annotations

import os
import sys
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

SEGMENTS = ("bargain", "family", "gadget", "luxury")
COUNTRIES = ("br", "de", "fr", "jp", "us")
CATEGORIES = ("books", "food", "tools", "toys")


def make(out: str, users: int = 2000, items: int = 1000, days: int = 3, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(out, "events"), exist_ok=True)
    segment = rng.integers(0, len(SEGMENTS), users)
    centers = 2 * rng.normal(size=(len(SEGMENTS), 4))
    taste = centers[segment] + rng.normal(size=(users, 4))
    user_ids = [str(uuid.UUID(bytes=rng.bytes(16))) for _ in range(users)]
    table = {"user_id": user_ids, "age": rng.integers(18, 80, users),
             "spend": np.round(rng.gamma(2.0, 50.0, users), 2)}
    noisy = taste + 3 * rng.normal(size=taste.shape)      # features alone are not enough
    table.update({f"taste{i}": np.round(noisy[:, i], 3) for i in range(4)})
    table.update({"country": rng.choice(COUNTRIES, users),
                  "segment": [SEGMENTS[s] for s in segment]})
    pacsv.write_csv(pa.table(table), os.path.join(out, "users.csv"))

    item_segment = rng.integers(0, len(SEGMENTS), items)
    embedding = centers[item_segment] + rng.normal(size=(items, 4))
    asins = [f"B0{x:08X}" for x in rng.choice(16**8, items, replace=False)]
    pq.write_table(pa.table({
        "asin": asins, "price": np.round(rng.gamma(2.0, 20.0, items), 2),
        "embedding": pa.array([list(np.round(e, 3)) for e in embedding],
                              pa.list_(pa.float32(), 4)),
        "category": rng.choice(CATEGORIES, items)}), os.path.join(out, "items.parquet"))

    near = np.argsort(-(taste @ embedding.T), axis=1)[:, :40]
    for day in range(days):
        n = users * 3
        who = rng.integers(0, users, n)
        what = near[who, rng.integers(0, near.shape[1], n)]
        pacsv.write_csv(pa.table({"user": [user_ids[i] for i in who],
                                  "item": [asins[i] for i in what],
                                  "amount": np.round(rng.gamma(2.0, 10.0, n), 2)}),
                        os.path.join(out, "events", f"day-{day:02d}.csv"))
    a = rng.integers(0, items, items * 5)
    similar = np.argsort(-(embedding @ embedding.T), axis=1)[:, 1:6]
    b = similar[a, rng.integers(0, 5, len(a))]
    pq.write_table(pa.table({"a": [asins[i] for i in a], "b": [asins[i] for i in b]}),
                   os.path.join(out, "also_viewed.parquet"))


if __name__ == "__main__":
    make(sys.argv[1], *(int(x) for x in sys.argv[2:3]))
