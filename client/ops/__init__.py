"""Operations tooling: the local cluster launcher, chaos runs and their history checker,
verify-replicas, the container healthcheck, certificates and the demos. Used by the command line
(``client.cli``), the tests and the scripts; the library (``client.*``) never imports it."""
