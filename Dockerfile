# The kubetrain image: the controller, the CLI and the KFP launcher components.
#   docker build -t kubetrain/kubetrain:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kubetrain kubetrain
COPY controller controller
COPY operators operators
COPY components components
RUN pip install --no-cache-dir --prefix=/install ".[controller,kfp]"

FROM python:3.11-slim
COPY --from=build /install /usr/local
RUN useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin kubetrain
USER 65532:65532
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["kubetrain"]
CMD ["controller", "run"]
