# An image with every platform portability runs on Linux: the server targets, the web targets in Debian's
# Chromium, LiteRT and the onnx2tf / TF.js converters, ExecuTorch, and the ARM64 builds under qemu emulation.
# A recipe: nothing in the project builds or needs it.
#
#   docker build -t portability .
#   docker run --rm -v "$PWD:/models" portability check /models/model.onnx -t server,web,mobile
#
# About 6 GB: TensorFlow (the [mobile] extra, ~1.7 GB), PyTorch's CPU build (~750 MB), the npm packages of the web
# harness (~508 MB), Chromium, the ARM64 root file system (~480 MB).
FROM debian:bookworm-slim

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/portability \
    PATH=/opt/portability/bin:$PATH \
    PORTABILITY_CACHE_DIR=/opt/portability-cache

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*

COPY pyproject.toml README.md /src/
COPY portability /src/portability

# the core first, then PyTorch's CPU build from its own index (PyPI's torch brings GBs of CUDA), then every extra
# (the torch already there satisfies [torch]), then the Debian packages, npm packages, no-deps converters and the
# ARM64 root file system
RUN python3 -m venv "$VIRTUAL_ENV" \
    && pip install /src \
    && portability setup torch \
    && pip install '/src[all]' \
    && portability setup all --with-deps \
    && rm -rf /var/lib/apt/lists/* /root/.npm

WORKDIR /models
ENTRYPOINT ["portability"]
CMD ["doctor"]
