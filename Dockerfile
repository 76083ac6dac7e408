# syntax=docker/dockerfile:1
# mcp-resume-gateway: the gateway, and the demo replica (demo/dist/replica.js) for trying it out.
#
#   docker build -t mcp-resume-gateway:0.1.0 .
#   docker run --rm -p 8080:8080 -p 9464:9464 \
#     -v "$PWD/my-gateway.yaml:/app/config/gateway.yaml:ro" mcp-resume-gateway:0.1.0
#
# The image's own /app/config/gateway.yaml is deploy/config/gateway.container.yaml: it binds
# 0.0.0.0 (the repository's config/gateway.yaml binds 127.0.0.1, unreachable from outside a
# container). Mount another file over it, or name one with MCP_GATEWAY_CONFIG.
# test/ops/image.test.ts replays the build and start steps of this file without a docker engine.

ARG NODE_IMAGE=node:20-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
# The npm cache lives in a BuildKit cache mount: faster rebuilds, and never part of a layer.
RUN --mount=type=cache,target=/root/.npm npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY demo ./demo
RUN npm run build

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --no-audit --no-fund
# The demo is a package of its own: the MCP SDK and zod it runs on go to demo/node_modules, never
# into the gateway's dependencies.
COPY demo/package.json demo/package-lock.json ./demo/
RUN --mount=type=cache,target=/root/.npm npm ci --prefix demo --omit=dev --no-audit --no-fund
COPY --from=build /app/dist ./dist
COPY --from=build /app/demo/dist ./demo/dist
COPY config ./config
COPY deploy/config/gateway.container.yaml ./config/gateway.yaml
# 1000:1000 is the base image's `node` user. Numeric, so that Kubernetes' runAsNonRoot can verify
# it (a user name cannot be checked without reading /etc/passwd of the image).
USER 1000:1000
# MCP endpoint and admin listener (/metrics /healthz /readyz) of the container configuration.
EXPOSE 8080 9464
# No curl in slim images: Node's fetch. MCP_GATEWAY_ADMIN_PORT is the same variable the container
# configuration reads for admin.port.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.MCP_GATEWAY_ADMIN_PORT||9464)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# Exec form: node is PID 1 and receives SIGTERM itself; the CLI's handlers drain and exit 0.
# The gateway starts no child processes, so no init is needed to reap zombies (`docker run --init`
# does no harm).
ENTRYPOINT ["node", "dist/cli.js"]
