# The CPython interpreters and Python package sets the server is built with.
#
# `app` is nixpkgs' CPython, unchanged, with the project's package pins: packages.default, the
# dev shell and the checks use it, and everything but the pins comes from the binary cache.
# `image` is the same CPython release with what an image without a shell cannot hold taken out,
# and `imagePackages` its package set with the tests of the server's runtime dependencies
# skipped; only the OCI image uses them.
#
# CPython applies `packageOverrides` to its build-platform interpreter too
# (`pythonOnBuildForHost`, whose packages supply the build tools of every package in the set).
# Only the pin goes there: no build tool depends on pglast, so nothing else in that set
# changes. The image's test-skipping overrides go through `overrideScope` instead, which
# leaves the spliced build-platform set alone: setuptools, Cython, hatchling and psycopg's
# Sphinx documentation stack stay nixpkgs' own and come from the binary cache, instead of being
# rebuilt, tests and all, because one of their dependencies was overridden.
{
  lib,
  bash,
  bashInteractive,
  coreutils,
  fetchPypi,
  python3,
}:
let
  # Python packages whose exact release the server depends on.
  pins = pyfinal: pyprev: {
    # The query policy's parser: pglast wraps PostgreSQL's own grammar (libpg_query), and its
    # AST follows the PostgreSQL major release it embeds, so the server is tested against
    # exactly this release.
    pglast = pyprev.pglast.overridePythonAttrs (
      old:
      let
        version = "8.8";
      in
      {
        inherit version;
        src = fetchPypi {
          pname = "pglast";
          inherit version;
          hash = "sha256-/5mY7GusTzD4Tba27bKKD7A7HtpcitIRq4Ni9aCLgzs=";
        };
        # The sdist carries Cython's output (pglast/parser.c) and libpg_query's sources, so
        # setuptools and the C compiler build it without Cython. Its build requirements name
        # exact releases of both, newer than the pinned nixpkgs; they are relaxed here, and the
        # patches of the nixpkgs expression, written for another release, are replaced.
        postPatch = ''
          substituteInPlace pyproject.toml \
            --replace-fail '"cython==3.3.0",' "" \
            --replace-fail '"setuptools==84.2.1",' '"setuptools",'
        '';
        build-system = [ pyfinal.setuptools ];
        # Nothing at run time: older expressions listed setuptools, which would put a packaging
        # tool into the image.
        dependencies = [ ];
        # pglast's own suite pins its test tools to exact releases and reads pytest's native
        # TOML configuration; the server's suite tests the parts of pglast the policy relies on,
        # and the import check below loads the compiled parser.
        doCheck = false;
        pythonImportsCheck = [
          "pglast"
          "pglast.parser"
        ];
        meta = old.meta // {
          changelog = "https://github.com/lelit/pglast/blob/v${version}/CHANGES.rst";
        };
      }
    );
  };

  # The runtime dependencies of the server, rebuilt against the image's interpreter. Their test suites already ran against the same
  # sources and the same CPython release in the default package set; a second run against an
  # interpreter that differs in one stdlib string would only add hours and the flakiness of
  # timing-sensitive tests. The pinned package skips its own suite in every set.
  imageRuntimeDependencies = [
    "annotated-types"
    "psutil"
    "psycopg"
    "psycopg-c"
    "psycopg-pool"
    "pydantic"
    "pydantic-core"
    "typing-extensions"
    "typing-inspection"
  ];

  withoutChecks =
    _final: prev:
    lib.genAttrs (lib.filter (name: prev ? ${name}) imageRuntimeDependencies) (
      name: prev.${name}.overridePythonAttrs { doCheck = false; }
    );

  app = python3.override {
    self = app;
    packageOverrides = pins;
  };

  image =
    (python3.override {
      self = image;
      packageOverrides = pins;
    }).overrideAttrs
      (old: {
        # subprocess.py names the store path of bash as the shell for shell=True, which would
        # put bash in every closure that holds this interpreter. The server never starts a
        # program, so the literal /bin/sh comes back: in the image it does not exist, and such a
        # call fails instead of finding a shell.
        postPatch = (old.postPatch or "") + ''
          sed -i -E "s|'$NIX_STORE/[^']*/bin/sh'|'/bin/sh'|" Lib/subprocess.py
          if grep -F "$NIX_STORE" Lib/subprocess.py; then
            echo "Lib/subprocess.py still names a store path" >&2
            exit 1
          fi
        '';
        # pip's bootstrapper and the IDLE shell have no place in an appliance without a
        # package manager or a shell.
        postInstall = (old.postInstall or "") + ''
          rm -r "$out/lib/${python3.libPrefix}/ensurepip" \
            "$out/lib/${python3.libPrefix}/idlelib" \
            "$out/lib/${python3.libPrefix}/turtledemo"
          rm "$out"/bin/idle*
        '';
        # patchShebangs pointed the shell scripts of the build configuration (python-config,
        # makesetup, install-sh) at bash. They serve only builds of C extensions, which run in a
        # sandbox that has /bin/sh, so their shebangs go back to it.
        postFixup = (old.postFixup or "") + ''
          scripts=$(grep -rlIE "^#! ?$NIX_STORE/[^/]+-bash[^/]*/bin/" "$out" || true)
          for script in $scripts; do
            sed -i -E "1s|^#! ?$NIX_STORE/[^/]+-bash[^/]*/bin/(ba)?sh|#!/bin/sh|" "$script"
          done
        '';
        # Fail here, with the name of the culprit, rather than in the image check.
        disallowedRequisites = (old.disallowedRequisites or [ ]) ++ [
          bash
          bashInteractive
          coreutils
        ];
      });
in
{
  inherit app image;
  imagePackages = image.pkgs.overrideScope withoutChecks;
}
