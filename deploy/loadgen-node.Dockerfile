# The loadgen-node image. Built by deploy/build-images.sh, which fills the
# build context with a root file system holding only the loadgen-node binary
# (plus, for a glibc build, the shared libraries and loader `ldd` lists) and
# an /etc/passwd and /etc/group naming the unprivileged user below. Nothing
# is pulled from a registry.
FROM scratch
COPY rootfs/ /
# The MLPerf logs go to /out (mount a host directory there); the working
# directory is where an audit.config is looked for, as by the official
# LoadGen.
COPY --chown=65532:65532 out/ /out/
USER 65532:65532
WORKDIR /out
ENTRYPOINT ["/usr/local/bin/loadgen-node"]
CMD ["--help"]
