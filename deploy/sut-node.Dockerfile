# The sut-node image. Built by deploy/build-images.sh, which fills the build
# context with a root file system holding only the sut-node binary (plus, for
# a glibc build, the shared libraries and loader `ldd` lists) and an
# /etc/passwd and /etc/group naming the unprivileged user below. Nothing is
# pulled from a registry.
FROM scratch
COPY rootfs/ /
USER 65532:65532
# gRPC on TCP; QUIC (quic://) on UDP, same port number.
EXPOSE 50051/tcp 50051/udp
# The node's Health RPC: healthy once the backend is loaded and warmed up.
# A node started on another port (serve --listen 0.0.0.0:PORT) needs the
# same address here: docker run --health-cmd, or the compose healthcheck.
HEALTHCHECK --interval=5s --timeout=4s --start-period=120s --retries=3 \
    CMD ["/usr/local/bin/sut-node", "health", "--addr", "127.0.0.1:50051", "--timeout", "3"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/sut-node"]
CMD ["serve", "--listen", "0.0.0.0:50051", "--backend", "synthetic"]
