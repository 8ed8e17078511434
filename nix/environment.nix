# Renders the server's settings into the environment variables it reads, as pure data.
#
# Booleans become true/false, lists become comma-separated, numbers their shortest decimal
# form, and unset (null) settings are left out so that the server's own default applies.
# Evaluates without nixpkgs, so that the offline check can hand the result to the server's
# --check-config.
{ settings }:
let
  render =
    value:
    if builtins.isBool value then
      (if value then "true" else "false")
    else if builtins.isList value then
      builtins.concatStringsSep "," (map render value)
    else if builtins.isFloat value then
      builtins.toJSON value
    else
      toString value;

  unset = builtins.filter (name: settings.${name} == null) (builtins.attrNames settings);
in
builtins.mapAttrs (_: render) (builtins.removeAttrs settings unset)
