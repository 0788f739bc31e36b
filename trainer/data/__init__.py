"""Data a batch carries: features and caches, learnable embeddings, seed loaders, link data, negatives."""
