"""Build once, ship everywhere: programs compiled from source on one node per distinct build.

Compiling NCCL takes minutes per node; a cluster of identical nodes needs it compiled once. A
build is identified by everything that makes its output differ (source, build script, OS,
GPU architecture, CUDA…): the first node of each identity builds it into a tarball with a
sha256, the control machine fetches it into its cache, and every other node receives it, checks
the checksum and unpacks it under <prefix>/<version>-<build id> with a <prefix>/current symlink.
"""
