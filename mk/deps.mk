# Debian packages the project and its tests need, installed by `make deps` (and so by `make test`
# and `make demo`): only what is missing, as root directly, otherwise through sudo. ccache makes
# rebuilds and fresh clones fast (the Makefile uses it when present), lld links faster. EXTRA_PACKAGES: what one
# target needs besides (make coverage: gcovr).
DEB_PACKAGES := g++ make openmpi-bin libopenmpi-dev libopenblas-dev libopenblas0-openmp libeigen3-dev \
  libboost-program-options-dev doctest-dev libstb-dev libjpeg62-turbo-dev nlohmann-json3-dev \
  zlib1g-dev python3-torch python3-torchvision python3-numpy python3-pil dataset-fashion-mnist \
  slurm-wlm iproute2 clang libclang-rt-14-dev libxgboost-dev libcpp-httplib-dev chromium curl pkg-config \
  libtinyxml2-dev libarchive-dev ccache lld

.PHONY: deps
deps:
	@missing=""; for p in $(DEB_PACKAGES) $(EXTRA_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
