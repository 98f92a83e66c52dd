# corral's session wrapper (bash). Arguments: the session's directory, the
# session's cookie, the command line (absent: it is in DIR/cmd). Each
# command is a fresh bash in its own contained tree: the state of the
# previous command is sourced from DIR/vars and DIR/opts, the command is
# evaluated, and the state after it is written to DIR/vars.new and
# DIR/opts.new (never to stdout or stderr). A command that ends the shell
# (exit, exec, a signal) writes no state: the session sees no
# "# corral: complete" line and ends.
builtin set -- "$1" "$2" "$3" "$#" "${CORRAL_TREE-}"
builtin source "$1/vars" >/dev/null 2>&1
# Defined after the state (whose own copy it replaces), with aliases off
# (the state's options, aliases expansion included, come after).
builtin shopt -u expand_aliases
__corral_end() {
  builtin shopt -p >|"$__corral_d/opts.new"
  builtin set +o >>"$__corral_d/opts.new"
  builtin set +euxv +o pipefail
  builtin local __corral_n
  {
    builtin printf '%s\n' 'builtin unalias -a'
    builtin alias -p
    builtin declare -f
    builtin declare -F
    for __corral_n in "${!A@}" "${!B@}" "${!C@}" "${!D@}" "${!E@}" "${!F@}" "${!G@}" \
      "${!H@}" "${!I@}" "${!J@}" "${!K@}" "${!L@}" "${!M@}" "${!N@}" "${!O@}" "${!P@}" \
      "${!Q@}" "${!R@}" "${!S@}" "${!T@}" "${!U@}" "${!V@}" "${!W@}" "${!X@}" "${!Y@}" \
      "${!Z@}" "${!a@}" "${!b@}" "${!c@}" "${!d@}" "${!e@}" "${!f@}" "${!g@}" "${!h@}" \
      "${!i@}" "${!j@}" "${!k@}" "${!l@}" "${!m@}" "${!n@}" "${!o@}" "${!p@}" "${!q@}" \
      "${!r@}" "${!s@}" "${!t@}" "${!u@}" "${!v@}" "${!w@}" "${!x@}" "${!y@}" "${!z@}" \
      "${!_@}"; do
      case $__corral_n in
      BASH | BASHOPTS | BASHPID | BASH_* | SHELLOPTS | EUID | UID | PPID | RANDOM | SRANDOM | \
        SECONDS | LINENO | FUNCNAME | GROUPS | HISTCMD | EPOCHREALTIME | EPOCHSECONDS | \
        PIPESTATUS | DIRSTACK | COMP_* | PWD | OLDPWD | CORRAL_TREE | _ | __corral_*) continue ;;
      esac
      builtin declare -p -- "$__corral_n"
    done
    builtin printf 'builtin cd -- %q\n' "$PWD"
    if [[ -n ${OLDPWD+set} ]]; then builtin declare -p OLDPWD; fi
    builtin umask -p
    builtin trap -p
    builtin printf '%s\n' '# corral: complete'
  } >|"$__corral_d/vars.new" 2>/dev/null
  builtin trap - EXIT
  builtin exit "$1"
}
__corral_d=$1
builtin export CORRAL_TREE="${5:+$5,}$2"
if [[ $4 -ge 3 ]]; then __corral_c=$3; else IFS= builtin read -r -d '' __corral_c <"$1/cmd"; fi
builtin set --
builtin source "$__corral_d/opts" >/dev/null 2>&1
{ builtin eval "$__corral_c"; { __corral_end "$?"; } 2>/dev/null; }
