"""machine (a shelf of the ground floor): the machine the pipeline runs on: host (the repository, podman's settings,
ulimits, the host lock, the commit), runtimes (each runtime's command line and process environment), lockpaths (where a
stack's lock lives), environment_records (the images' and venvs' records: their paths per runtime, identity).

May import: the ground floor only."""
