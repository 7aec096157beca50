# Day0 as a container image: the containerized delivery step of the Day-0 workflow, and the image
# `day0 plan --emit k8s` deploys.
#   docker build -t day0:latest .
#   docker run --rm -v /srv/models:/models day0:latest adapt /models/MODEL
# The build stage runs the README's build (`make build-day0`: scripts/bootstrap.sh installs the Debian
# packages above the "make test" line of scripts/debian-packages.txt; MPI is added for distributed
# runs). The image keeps the binary, the shared libraries it links (tests/cli_fast/dockerfile_test.cpp
# checks the list against the binary), mpirun, and ssh (mpirun starts other nodes' ranks over ssh).
FROM debian:bookworm-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates make libopenmpi-dev openmpi-bin \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN rm -rf build && apt-get update && make build-day0 && strip build/release/bin/day0

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
       libstdc++6 libfmt9 libssl3 libpcre2-8-0 libutf8proc2 zlib1g libbrotli1 libcpp-httplib0.11 libopenmpi3 \
       openmpi-bin openssh-server openssh-client \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/release/bin/day0 /usr/local/bin/day0
ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ENTRYPOINT ["day0"]
CMD ["--help"]
