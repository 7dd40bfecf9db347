# Wick on CPU: the OpenAI/Ollama-compatible server, installed from the same npm packages users
# install (no Rust in the image). GPU servers' conventions: port published, the model store a
# volume so pulls persist, HF_TOKEN passed through at run time (never baked in), /health checked.
#
#   docker build -t wick .
#   docker run -d -p 11434:11434 -v wick:/data -e HF_TOKEN wick serve -m hf.co/LiquidAI/LFM2-350M-GGUF:Q4_K_M
#   docker run -d -p 11434:11434 -v $PWD/models:/models:ro wick serve -m /models/model.gguf
#
# The build stage runs CI's commands (.ci/run's `npm install`, scripts/test.sh's build) and then
# scripts/pack.sh, whose tarballs test/package.test.ts installs; the image installs them as a
# user would (`npm install -g`). With tarballs already packed (scripts/pack.sh artifacts/pack),
# skip the Rust build: docker build --build-arg PACKAGES=prebuilt -t wick .
ARG NODE_IMAGE=node:20-bookworm-slim
ARG RUST_IMAGE=rust:1-bookworm
ARG PACKAGES=build

FROM ${NODE_IMAGE} AS node

FROM ${RUST_IMAGE} AS build
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx
WORKDIR /src
COPY . .
RUN npm install
RUN npm run build:native
RUN bash scripts/pack.sh /pkg

FROM scratch AS prebuilt
COPY artifacts/pack/*.tgz /pkg/

FROM ${PACKAGES} AS packages

FROM ${NODE_IMAGE}
COPY --from=packages /pkg/ /tmp/pkg/
# The root package and this machine's binary package (the directory may hold other platforms').
RUN npm install -g --no-audit --no-fund --include=optional /tmp/pkg/wick-[0-9]*.tgz /tmp/pkg/wick-linux-$(node -p process.arch)-gnu-*.tgz && rm -rf /tmp/pkg /root/.npm
ENV WICK_HOST=0.0.0.0:11434 \
    WICK_HOME=/data
VOLUME /data
EXPOSE 11434
# /health needs no API key; the port follows WICK_HOST when it is changed at run time.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
  CMD ["node", "-e", "fetch(`http://127.0.0.1:${(process.env.WICK_HOST || '').split(':').pop() || 11434}/health`).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["wick"]
CMD ["serve"]
