# The pod sandbox's image: Kubernetes' pause binary (tools/node/build.sh compiles it from
# build/pause/linux/pause.c), packed as build/pause/Dockerfile packs it.
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
