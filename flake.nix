{
  description = "Hardened MCP server over stdio: read-only SQL, sandboxed file reads, host metrics";

  # nixpkgs is the only input, so there is nothing for a `follows` to share.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-26.05";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;

      # Linux only: the server reads /proc, the image is a Linux container and the module is
      # a set of systemd units.
      forAllSystems = lib.genAttrs [
        "x86_64-linux"
        "aarch64-linux"
      ];

      pkgsFor = forAllSystems (
        system:
        import nixpkgs {
          inherit system;
          overlays = [ self.overlays.default ];
        }
      );
    in
    {
      overlays.default = import ./nix/overlay.nix;

      nixosModules.default = ./nix/module.nix;

      packages = forAllSystems (system: {
        default = pkgsFor.${system}.mcp-server-suite;
        image = pkgsFor.${system}.callPackage ./nix/image.nix { };
      });

      apps = forAllSystems (system: {
        default = {
          type = "app";
          program = lib.getExe self.packages.${system}.default;
          meta.description = "Run the MCP server on standard input and output";
        };
      });

      devShells = forAllSystems (system: {
        default = pkgsFor.${system}.callPackage ./nix/devshell.nix {
          python = (pkgsFor.${system}.callPackage ./nix/python.nix { }).app;
        };
      });

      checks = forAllSystems (
        system:
        let
          pkgs = pkgsFor.${system};
        in
        {
          # The package's build runs the test suite.
          package = self.packages.${system}.default;
          image-no-shell = pkgs.callPackage ./nix/checks/no-shell.nix {
            image = self.packages.${system}.image;
          };
          mypy = pkgs.callPackage ./nix/checks/mypy.nix {
            python = (pkgs.callPackage ./nix/python.nix { }).app;
          };
          vm-test = pkgs.callPackage ./nix/vm-test.nix { module = self.nixosModules.default; };
        }
      );

      formatter = forAllSystems (system: pkgsFor.${system}.nixfmt-tree);
    };
}
