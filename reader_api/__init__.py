"""Read API: rank, top-N, around-me and friends lists over the Redis layout in :mod:`hotboard.keys`."""
