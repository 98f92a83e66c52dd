//! Ordinary work still runs inside a sandbox (issue 33): a C program
//! compiled and run in the working directory, git, Python, pipes, /tmp.

#![cfg(target_os = "linux")]

mod sandbox_common;

use corral::Sandbox;
use sandbox_common::*;

#[test]
fn compile_and_run_a_c_program_in_the_working_directory() {
    let s = corral_testkit::Scratch::new();
    std::fs::write(
        s.path("hello.c"),
        "#include <stdio.h>\nint main(void){puts(\"hello from c\");return 0;}\n",
    )
    .unwrap();
    let r = run(&s, "cc -o hello hello.c && ./hello", Sandbox::new());
    assert_eq!(r.exit_code(), Some(0), "{}", text(&r.stderr));
    assert_eq!(text(&r.stdout), "hello from c\n");
    assert!(s.path("hello").exists());
}

#[test]
fn git_init_add_commit() {
    let s = corral_testkit::Scratch::new();
    let mut c = command(
        &s,
        "git init -q repo && cd repo && echo a > a && git add a && git commit -qm first && git log --format=%s",
        Sandbox::new(),
    );
    c.env("HOME", s.dir())
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1");
    let r = c.run().unwrap();
    assert_eq!(r.exit_code(), Some(0), "{}", text(&r.stderr));
    assert_eq!(text(&r.stdout), "first\n");
}

#[test]
fn python_pipes_and_tmp_within_a_run() {
    let s = corral_testkit::Scratch::new();
    let r = run(
        &s,
        "seq 1 1000 | /usr/bin/python3 -c 'import sys,tempfile\nt=tempfile.NamedTemporaryFile(\"w\",delete=False)\nt.write(str(sum(int(l) for l in sys.stdin)))\nt.close()\nprint(open(t.name).read(), t.name.startswith(\"/tmp/\"))' | tr a-z A-Z",
        Sandbox::new(),
    );
    assert_eq!(r.exit_code(), Some(0), "{}", text(&r.stderr));
    assert_eq!(text(&r.stdout), "500500 TRUE\n");
}

#[test]
fn devices_and_allow_write_paths_are_writable() {
    let extra = Victims::new();
    let s = corral_testkit::Scratch::new();
    let script = format!(
        "echo x > /dev/null && head -c 4 /dev/urandom | wc -c && head -c 2 /dev/zero | wc -c && echo ok > '{}/out'",
        extra.dir().display()
    );
    let r = run(&s, &script, Sandbox::new().allow_write(extra.dir()));
    assert_eq!(r.exit_code(), Some(0), "{}", text(&r.stderr));
    assert_eq!(text(&r.stdout), "4\n2\n");
    assert_eq!(
        std::fs::read_to_string(extra.dir().join("out")).unwrap(),
        "ok\n"
    );
}
