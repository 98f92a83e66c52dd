# corral's session wrapper (bash). Arguments: the session's directory, the
# session's cookie, and how the command line comes: `c` followed by it, `f`
# (it is in DIR/cmd), or `w` (a warm shell: started ahead, it waits for a
# message on the FIFO DIR/go: `c` and the line, or `f`, ended by a NUL).
# Each command is a fresh bash in its own contained tree: the state of the
# previous command is sourced from DIR/vars and DIR/opts, the command is
# evaluated, and the state after it is written to DIR/vars.new and
# DIR/opts.new (never to stdout or stderr; corral filters the variables out
# of `declare -p` that are bash's own). A command that ends the shell (exit,
# exec, a signal) writes no state: the session sees no "# corral: complete"
# line and ends.
builtin set -- "$1" "$2" "$3" "$#" "${CORRAL_TREE-}"
builtin source "$1/vars" >/dev/null 2>&1
# Defined after the state (whose own copy it replaces), with aliases off
# (the state's options, aliases expansion included, come after).
builtin shopt -u expand_aliases
__corral_end() {
  builtin local __corral_s=$1 __corral_i
  builtin shift
  {
    builtin shopt -p
    builtin set +o
    if (($#)); then
      builtin printf 'builtin set --'
      builtin printf ' %q' "$@"
      builtin printf '\n'
    fi
    builtin printf '__corral_rc=%s\n' "$__corral_s"
  } >|"$__corral_d/opts.new"
  builtin set +euxv +o pipefail
  {
    builtin declare -p
    builtin printf '%s\n' '# corral: variables end' 'builtin unalias -a'
    builtin alias -p
    builtin declare -f
    builtin declare -F
    builtin printf 'builtin cd -- %q\n' "$PWD"
    if [[ -n ${OLDPWD+set} ]]; then builtin declare -p OLDPWD; fi
    for ((__corral_i = ${#DIRSTACK[@]} - 1; __corral_i > 0; __corral_i--)); do
      builtin printf 'builtin pushd -n -- %q >/dev/null\n' "${DIRSTACK[__corral_i]}"
    done
    builtin umask -p
    builtin trap -p
    builtin printf '%s\n' '# corral: complete'
  } >|"$__corral_d/vars.new" 2>/dev/null
  builtin trap - EXIT
  builtin exit "$__corral_s"
}
__corral_rs() { return "$1"; }
__corral_d=$1
builtin export CORRAL_TREE="${5:+$5,}$2"
__corral_c=$3
__corral_w=$3
__corral_x=
builtin set --
__corral_rc=0
if [[ $__corral_w == w ]]; then
  # Warm: the options now (their effect on what follows kept off: the
  # trace and verbose options only show from the command on), then wait.
  builtin source "$__corral_d/opts" >/dev/null 2>&1
  {
    __corral_x=
    case $- in *x*) __corral_x=x ;; esac
    case $- in *v*) __corral_x+=v ;; esac
    builtin set +xv
  } 2>/dev/null
  IFS= builtin read -r -d '' __corral_c <"$__corral_d/go" || builtin exit 125
fi
if [[ $__corral_c == f ]]; then
  IFS= builtin read -r -d '' __corral_c <"$__corral_d/cmd"
else
  __corral_c=${__corral_c#c}
fi
if [[ $__corral_w != w ]]; then builtin source "$__corral_d/opts" >/dev/null 2>&1; fi
{ [[ -n $__corral_x ]] && builtin set "-$__corral_x"; } 2>/dev/null
{ __corral_rs "$__corral_rc" && :; } 2>/dev/null
{ builtin eval "$__corral_c"; { __corral_end "$?" "$@"; } 2>/dev/null; }
