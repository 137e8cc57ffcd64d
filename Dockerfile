# The kubetrain image: the controller, the CLI and the KFP launcher components.
#   docker build -t kubetrain/kubetrain:0.1.0 .
#
# The base is pinned by digest (docs/security.md#the-supply-chain): python:3.11.16-slim-trixie, the
# multi-platform index that docker-library/repo-info lists for that tag (repos/python/remote/
# 3.11.16-slim-trixie.md, images of 2026-08-25). A newer base is a new digest, taken from the same place.
# Its setuptools (79.0.1) builds kubetrain; every other package comes from requirements/image.txt,
# pinned, with its hashes (`make lock` regenerates it).
FROM python:3.11.16-slim-trixie@sha256:be1575ed968de893bd54f4c56315ff7c4736ce522c1bca08fd521731aafc0d76 AS build
WORKDIR /src
COPY requirements/image.txt requirements/image.txt
RUN pip install --no-cache-dir --prefix=/install --require-hashes --no-deps -r requirements/image.txt
COPY pyproject.toml README.md ./
COPY kubetrain kubetrain
COPY controller controller
COPY operators operators
COPY components components
RUN pip install --no-cache-dir --prefix=/install --no-deps --no-build-isolation .

FROM python:3.11.16-slim-trixie@sha256:be1575ed968de893bd54f4c56315ff7c4736ce522c1bca08fd521731aafc0d76
COPY --from=build /install /usr/local
RUN useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin kubetrain
USER 65532:65532
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["kubetrain"]
CMD ["controller", "run"]
