# corral's session wrapper (POSIX sh, where there is no bash): as
# wrapper.bash, but what sh can print is carried over: the working
# directory, variables (exported or not), shell options, umask. Functions
# and aliases are not (POSIX sh cannot print them back as input).
__corral_end() {
  set +o >"$__corral_d/opts.new"
  set +eux
  {
    set
    export -p
    printf '%s\n' 'cd -- "$PWD"'
    printf 'umask %s\n' "$(umask)"
    printf '%s\n' '# corral: complete'
  } >"$__corral_d/vars.new" 2>/dev/null
  trap - EXIT
  exit "$1"
}
set -- "$1" "$2" "$3" "$#" "${CORRAL_TREE-}"
. "$1/vars" >/dev/null 2>&1
__corral_d=$1
CORRAL_TREE="${5:+$5,}$2"
export CORRAL_TREE
if [ "$4" -ge 3 ]; then __corral_c=$3; else __corral_c=$(cat "$1/cmd"); fi
set --
. "$__corral_d/opts" >/dev/null 2>&1
{ eval "$__corral_c"; { __corral_end "$?"; } 2>/dev/null; }
