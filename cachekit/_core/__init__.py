"""The private core: values, protocols, the envelope codec, keys, argument checks and the one
sans-IO driver pair. Every layer may import it; it imports nothing else of cachekit. Users import
its public names from :mod:`cachekit`."""
