"""Configuration: the settings schema that refuses bad input before weights load, the keys a
composed config may hold, where a Hydra job writes, and how an entry point runs.
"""
