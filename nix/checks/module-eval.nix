# Evaluates nix/module.nix without nixpkgs and returns the units it defines, in the shape of
# units.nix, so that scripts/render-units.py renders what the module itself would produce.
#
# The module system is replaced by a stub of the few `lib` functions the module uses. The stub
# types check values as nixpkgs' types do, so every default and every value given here must
# pass the module's own option types; a value that does not makes the evaluation fail.
{
  # Values of services.mcp-server-suite, as a host configuration would set them.
  values ? { },
}:
let
  isOption = value: builtins.isAttrs value && value._type or null == "option";

  mkType = name: check: { inherit name check; };

  types = {
    addCheck = type: check: type // { check = value: type.check value && check value; };
    bool = mkType "bool" builtins.isBool;
    either = left: right: mkType "${left.name} or ${right.name}" (
      value: left.check value || right.check value
    );
    enum = choices: mkType "enum" (value: builtins.elem value choices);
    ints.between =
      low: high:
      mkType "int between" (value: builtins.isInt value && value >= low && value <= high);
    listOf = type: mkType "list" (value: builtins.isList value && builtins.all type.check value);
    nonEmptyListOf =
      type: mkType "non-empty list" (value: (types.listOf type).check value && value != [ ]);
    nullOr = type: mkType "null or ${type.name}" (value: value == null || type.check value);
    number = mkType "number" (value: builtins.isInt value || builtins.isFloat value);
    str = mkType "str" builtins.isString;
    strMatching =
      pattern:
      mkType "str matching ${pattern}" (
        value: builtins.isString value && builtins.match pattern value != null
      );
    submodule = module: mkType "submodule" builtins.isAttrs // { inherit (module) options; };
  };

  lib = {
    inherit types;
    concatStringsSep = builtins.concatStringsSep;
    getExe = package: "${package.outPath}/bin/${package.meta.mainProgram}";
    hasPrefix =
      prefix: string: builtins.substring 0 (builtins.stringLength prefix) string == prefix;
    mapAttrs = builtins.mapAttrs;
    mkDefault = content: {
      _type = "override";
      inherit content;
    };
    mkEnableOption = description: lib.mkOption {
      type = types.bool;
      default = false;
      inherit description;
    };
    mkIf = condition: content: {
      _type = "if";
      inherit condition content;
    };
    mkOption = option: option // { _type = "option"; };
    mkPackageOption = pkgs: name: _: lib.mkOption {
      type = mkType "package" builtins.isAttrs;
      default = pkgs.${name};
      description = "The ${name} package to use.";
    };
  };

  pkgs.mcp-server-suite = {
    outPath = "/nix/store/00000000000000000000000000000000-mcp-server-suite";
    meta.mainProgram = "mcp-server-suite";
  };

  # The value of every option: the one given, else its default; submodules recursively.
  resolve =
    path: options: given:
    builtins.mapAttrs (
      name: option:
      let
        here = "${path}.${name}";
        value =
          if !isOption option then
            resolve here option (given.${name} or { })
          else if option.type ? options then
            resolve here option.type.options (given.${name} or option.default)
          else
            given.${name} or option.default;
      in
      if isOption option && !option.type.check value then
        throw "${here}: ${builtins.toJSON value} is not a ${option.type.name}"
      else
        value
    ) options;

  module = import ../module.nix {
    inherit lib pkgs;
    config.services.mcp-server-suite = cfg;
  };

  cfg = resolve "services.mcp-server-suite" module.options.services.mcp-server-suite values;

  # mkDefault and friends only set priorities; the rendered units see their contents.
  unwrap = builtins.mapAttrs (
    _: value: if value._type or null == "override" then value.content else value
  );

  config =
    assert module.config._type == "if" && module.config.condition == cfg.enable;
    module.config.content;

  failedAssertions = builtins.filter (a: !a.assertion) config.assertions;
  service = config.systemd.services."mcp-server-suite@";
in
assert failedAssertions == [ ] || throw (builtins.head failedAssertions).message;
{
  socket = config.systemd.sockets.mcp-server-suite.socketConfig;
  serviceUnit = service.unitConfig;
  service = unwrap service.serviceConfig;
  limits = { };
  inherit (service) environment;
  groups = builtins.attrNames config.users.groups;
}
