"""The tuner's adapters (`TUNING`, a `TuningTemplate`) of the kernels shipped in gluon/kernels/: how a
spec's config becomes a kernel config, and how to check and time it. The kernels never import these
(a kernel module knows nothing of the tuner); a spec names one as `template = "gluon.tuning.templates.
<module>:TUNING"`."""
