//! The keeper's messages: the layout both sides read and write (one
//! fixed-size `SOCK_SEQPACKET` datagram each, descriptors in `SCM_RIGHTS`).
//!
//! A message starts with [`VERSION`]; [`Message::decode`] is a pure
//! function over the bytes received that takes only a well-formed message
//! of this version (its length, kind, name length and padding, farewell
//! fields in range) and says why it refuses any other: the keeper ignores
//! a refused message (and closes the descriptor that came with it).

use std::os::raw::c_int;

/// The layout's version, the first byte of every message (both ends are
/// one build, a fork that never execs; the byte makes a change of layout
/// explicit and a stray datagram refused).
pub(super) const VERSION: u8 = 2;
/// Longest cgroup name carried.
pub(super) const NAME_MAX: usize = 64;
/// A cgroup: its directory, the slot of the directory it is in, its name.
pub(super) const OP_ADD: u8 = 1;
/// Unregisters the slot (when the id matches).
pub(super) const OP_DEL: u8 = 2;
/// A process-group or subreaper root: its pidfd, and its pid in the name
/// bytes (4 bytes).
pub(super) const OP_ADD_ROOT: u8 = 3;
/// A directory cgroups are in (sent once per directory, held until the
/// keeper ends).
pub(super) const OP_PARENT: u8 = 4;
/// Keeper to host, once, when it is ready: how many slots it has.
pub(super) const OP_HELLO: u8 = 5;
/// A tree's cookie (the `CORRAL_TREE` element its processes inherit), in
/// the name bytes, sent before the root is spawned; no descriptor.
pub(super) const OP_COOKIE: u8 = 6;
/// A member of a subreaper tree seen outside the root's group: its pidfd,
/// its pid in the name bytes (4 bytes).
pub(super) const OP_ADD_MEMBER: u8 = 7;
/// A new farewell for the tree held in the slot (when the id matches): a
/// run whose termination started (its first signal sent) is SIGKILLed at
/// once if the host dies.
pub(super) const OP_FAREWELL: u8 = 8;
/// The longest grace the keeper waits between a run's first signal and
/// its SIGKILL when the host dies (a longer one is cut to this): the
/// keeper's work after the host's death stays bounded
/// ([`FAREWELL_GRACE_MAX`](crate::spec::FAREWELL_GRACE_MAX), 10 s: the
/// grace `corral run -s SIG` has without `-k`).
pub(super) const GRACE_MAX_MS: u32 = crate::spec::FAREWELL_GRACE_MAX.as_millis() as u32;
/// The highest signal number a run's first signal can have (`SIGRTMAX`).
pub(super) const SIGNAL_MAX: u8 = 64;
/// version, op, first signal, name length, id (8 bytes), slot (4), parent
/// slot (4), grace in ms (4), name.
pub(super) const MSG_LEN: usize = 4 + 8 + 4 + 4 + 4 + NAME_MAX;
pub(super) const AT_OP: usize = 1;
pub(super) const AT_SIGNAL: usize = 2;
pub(super) const AT_NAME_LEN: usize = 3;
pub(super) const AT_ID: usize = 4;
pub(super) const AT_SLOT: usize = 12;
pub(super) const AT_PARENT: usize = 16;
pub(super) const AT_GRACE: usize = 20;
pub(super) const AT_NAME: usize = 24;

pub(super) const AF_UNIX: u32 = 1;
pub(super) const SOCK_SEQPACKET: u32 = 5;
pub(super) const SOL_SOCKET: c_int = 1;
pub(super) const SCM_RIGHTS: c_int = 1;
pub(super) const MSG_NOSIGNAL: u32 = 0x4000;
pub(super) const MSG_DONTWAIT: u32 = 0x40;
pub(super) const MSG_CMSG_CLOEXEC: u32 = 0x4000_0000;
/// cmsghdr (len, level, type) then one descriptor.
pub(super) const CMSG_HDR: usize = 16;
pub(super) const CMSG_LEN1: usize = CMSG_HDR + 4;

/// Bytes of the control buffer for one descriptor: `CMSG_SPACE(4)`, the
/// length rounded up to 8.
pub(super) const CONTROL_ONE: usize = CMSG_LEN1.div_ceil(8) * 8;

/// What the keeper does to a held tree when the host dies: SIGCONT and
/// `signal` (0: none) first, then SIGKILL `grace_ms` later to whatever is
/// left; a grace of 0 is SIGKILL at once (and no first signal).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Farewell {
    pub(super) signal: u8,
    pub(super) grace_ms: u32,
}

impl Farewell {
    /// SIGKILL at once.
    pub(super) const KILL: Farewell = Farewell {
        signal: 0,
        grace_ms: 0,
    };

    /// The farewell of a run whose first signal is `signal` (its number;
    /// SIGKILL or out of range: none) with `grace`: the grace cut to
    /// [`GRACE_MAX_MS`]; no grace, no first signal.
    pub(super) fn new(signal: i32, grace: std::time::Duration) -> Farewell {
        let grace_ms = grace.as_millis().min(u128::from(GRACE_MAX_MS)) as u32;
        if grace_ms == 0 {
            return Farewell::KILL;
        }
        let signal = match u8::try_from(signal) {
            Ok(s) if s <= SIGNAL_MAX && u32::from(s) != linux_raw_sys::general::SIGKILL => s,
            _ => 0,
        };
        Farewell { signal, grace_ms }
    }

    /// A run's farewell on the wire.
    pub(super) fn of(f: crate::spec::Farewell) -> Farewell {
        Farewell::new(f.first.map_or(0, |s| s.as_raw()), f.grace)
    }
}

/// One message, host to keeper (or the keeper's first, [`OP_HELLO`], with
/// its capacity in `slot`), decoded. `name` holds `name_len` bytes (a
/// cgroup's name, a tree's cookie, or a pid in 4 native-endian bytes), the
/// rest zeros; `farewell` is set on the adds of a tree (cgroup, root,
/// member, cookie) only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Message {
    pub(super) op: u8,
    pub(super) id: u64,
    pub(super) slot: u32,
    pub(super) parent: u32,
    pub(super) farewell: Farewell,
    pub(super) name_len: u8,
    pub(super) name: [u8; NAME_MAX],
}

/// Why [`Message::decode`] refused a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Invalid {
    /// Not [`MSG_LEN`] bytes.
    Length,
    /// Not [`VERSION`].
    Version,
    /// An unknown kind.
    Op,
    /// A name length past [`NAME_MAX`], or not the one the kind needs.
    NameLength,
    /// A NUL inside a cgroup's name or a cookie, or bytes past the name
    /// that are not zero.
    Name,
    /// A first signal past [`SIGNAL_MAX`], or one without a grace.
    Signal,
    /// A grace past [`GRACE_MAX_MS`].
    Grace,
    /// Farewell fields on a message that registers no tree.
    Farewell,
}

/// Whether messages of kind `op` register a tree (and carry a farewell).
const fn holds_tree(op: u8) -> bool {
    matches!(
        op,
        OP_ADD | OP_ADD_ROOT | OP_ADD_MEMBER | OP_COOKIE | OP_FAREWELL
    )
}

/// Reads 4 native-endian bytes at `at` (within `b`: the caller checked
/// the length).
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Message {
    /// A message of kind `op`, every other field zero.
    pub(super) const fn new(op: u8) -> Message {
        Message {
            op,
            id: 0,
            slot: 0,
            parent: 0,
            farewell: Farewell::KILL,
            name_len: 0,
            name: [0; NAME_MAX],
        }
    }

    /// A message of kind `op` carrying `name`; `None` if it is longer than
    /// [`NAME_MAX`].
    pub(super) fn with_name(op: u8, name: &[u8]) -> Option<Message> {
        let mut m = Message::new(op);
        m.name.get_mut(..name.len())?.copy_from_slice(name);
        m.name_len = name.len() as u8;
        Some(m)
    }

    /// A message of kind `op` carrying a pid (4 native-endian bytes).
    pub(super) fn with_pid(op: u8, pid: u32) -> Message {
        let mut m = Message::new(op);
        m.name[..4].copy_from_slice(&pid.to_ne_bytes());
        m.name_len = 4;
        m
    }

    /// The bytes on the wire: version, op, first signal, name length, id
    /// (8 bytes), slot (4), parent slot (4), grace in ms (4), name (native
    /// endian: both ends are one machine).
    pub(super) fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        b[0] = VERSION;
        b[AT_OP] = self.op;
        b[AT_SIGNAL] = self.farewell.signal;
        b[AT_NAME_LEN] = self.name_len;
        b[AT_ID..AT_ID + 8].copy_from_slice(&self.id.to_ne_bytes());
        b[AT_SLOT..AT_SLOT + 4].copy_from_slice(&self.slot.to_ne_bytes());
        b[AT_PARENT..AT_PARENT + 4].copy_from_slice(&self.parent.to_ne_bytes());
        b[AT_GRACE..AT_GRACE + 4].copy_from_slice(&self.farewell.grace_ms.to_ne_bytes());
        b[AT_NAME..].copy_from_slice(&self.name);
        b
    }

    /// Reads a message back from the bytes received (a pure function: no
    /// allocation, no panic, whatever the bytes; the keeper calls it).
    /// Only a well-formed message of this [`VERSION`] is taken, so that
    /// `encode(decode(b)) == b` for every `b` it takes.
    pub(super) fn decode(b: &[u8]) -> Result<Message, Invalid> {
        if b.len() != MSG_LEN {
            return Err(Invalid::Length);
        }
        if b[0] != VERSION {
            return Err(Invalid::Version);
        }
        let op = b[AT_OP];
        if !matches!(
            op,
            OP_ADD
                | OP_DEL
                | OP_ADD_ROOT
                | OP_PARENT
                | OP_HELLO
                | OP_COOKIE
                | OP_ADD_MEMBER
                | OP_FAREWELL
        ) {
            return Err(Invalid::Op);
        }
        let name_len = b[AT_NAME_LEN];
        let len = name_len as usize;
        let fits = match op {
            OP_ADD_ROOT | OP_ADD_MEMBER => len == 4,
            OP_ADD | OP_COOKIE => (1..=NAME_MAX).contains(&len),
            _ => len == 0,
        };
        if !fits {
            return Err(Invalid::NameLength);
        }
        let mut name = [0u8; NAME_MAX];
        let mut j = 0;
        while j < NAME_MAX {
            let c = b[AT_NAME + j];
            let text = matches!(op, OP_ADD | OP_COOKIE);
            if (j >= len && c != 0) || (j < len && text && c == 0) {
                return Err(Invalid::Name);
            }
            name[j] = c;
            j += 1;
        }
        let farewell = Farewell {
            signal: b[AT_SIGNAL],
            grace_ms: u32_at(b, AT_GRACE),
        };
        if !holds_tree(op) && farewell != Farewell::KILL {
            return Err(Invalid::Farewell);
        }
        if farewell.grace_ms > GRACE_MAX_MS {
            return Err(Invalid::Grace);
        }
        if farewell.signal > SIGNAL_MAX || (farewell.signal != 0 && farewell.grace_ms == 0) {
            return Err(Invalid::Signal);
        }
        Ok(Message {
            op,
            id: u64::from_ne_bytes([
                b[AT_ID],
                b[AT_ID + 1],
                b[AT_ID + 2],
                b[AT_ID + 3],
                b[AT_ID + 4],
                b[AT_ID + 5],
                b[AT_ID + 6],
                b[AT_ID + 7],
            ]),
            slot: u32_at(b, AT_SLOT),
            parent: u32_at(b, AT_PARENT),
            farewell,
            name_len,
            name,
        })
    }

    /// The keeper's capacity from its first message (the bytes read):
    /// `None` if it is not one (the keeper ended before it was ready).
    pub(super) fn capacity_of_hello(b: &[u8]) -> Option<u32> {
        Message::decode(b)
            .ok()
            .filter(|m| m.op == OP_HELLO)
            .map(|m| m.slot)
    }
}

/// The control message that passes `fd` with `SCM_RIGHTS`: cmsghdr (its
/// length, `SOL_SOCKET`, `SCM_RIGHTS`) then the descriptor.
pub(super) fn rights_control(fd: c_int) -> [u8; CONTROL_ONE] {
    let mut control = [0u8; CONTROL_ONE];
    control[0..8].copy_from_slice(&(CMSG_LEN1 as u64).to_ne_bytes());
    control[8..12].copy_from_slice(&SOL_SOCKET.to_ne_bytes());
    control[12..16].copy_from_slice(&SCM_RIGHTS.to_ne_bytes());
    control[16..20].copy_from_slice(&fd.to_ne_bytes());
    control
}

/// The descriptors a received control buffer carries: those of its first
/// message when it is `SCM_RIGHTS` at `SOL_SOCKET` (the host sends at most
/// one cmsghdr), within the lengths the header and the kernel gave. No
/// allocation, no panic (the keeper calls it).
pub(super) fn received_fds(control: &[u8], controllen: usize) -> ReceivedFds<'_> {
    let mut end = 0;
    if controllen >= CMSG_LEN1 && control.len() >= CMSG_HDR {
        let len = u64::from_ne_bytes([
            control[0], control[1], control[2], control[3], control[4], control[5], control[6],
            control[7],
        ]);
        let level = i32::from_ne_bytes([control[8], control[9], control[10], control[11]]);
        let typ = i32::from_ne_bytes([control[12], control[13], control[14], control[15]]);
        if level == SOL_SOCKET && typ == SCM_RIGHTS {
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            end = len.min(controllen).min(control.len());
        }
    }
    ReceivedFds {
        control,
        off: CMSG_HDR,
        end,
    }
}

/// What [`received_fds`] yields: each descriptor, in order.
pub(super) struct ReceivedFds<'a> {
    control: &'a [u8],
    off: usize,
    end: usize,
}

impl Iterator for ReceivedFds<'_> {
    type Item = c_int;

    fn next(&mut self) -> Option<c_int> {
        if self.off + 4 > self.end {
            return None;
        }
        let b = self.control.get(self.off..self.off + 4)?;
        self.off += 4;
        Some(c_int::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// The codec's properties, checked on arbitrary bytes by the fuzz target
/// `keeper_codec` (`fuzz/`, docs/FUZZING.md; cargo fuzz builds with
/// `--cfg fuzzing`). Panics when one does not hold.
#[cfg(fuzzing)]
pub mod fuzzing {
    use super::*;

    /// `data`: a datagram (its first [`MSG_LEN`] bytes, zero-padded), then
    /// a control buffer and the length the kernel said it filled.
    pub fn check(data: &[u8]) {
        let mut b = [0u8; MSG_LEN];
        let n = data.len().min(MSG_LEN);
        b[..n].copy_from_slice(&data[..n]);
        // A datagram of any length: decoded only when well formed, and
        // then encode ∘ decode = id (the codec is strict: versioned, every
        // byte accounted for).
        let raw = data.get(..data.len().min(MSG_LEN + 8)).unwrap_or_default();
        if let Ok(m) = Message::decode(raw) {
            assert_eq!(raw.len(), MSG_LEN);
            assert_eq!(&m.encode()[..], raw);
        }
        let len = usize::from(data.get(MSG_LEN).copied().unwrap_or(0));
        match Message::decode(&b) {
            Ok(m) => {
                assert_eq!(m.encode(), b);
                // Built from its parts, a message reads back as built.
                let name_len = usize::from(m.name_len);
                let mut built =
                    Message::with_name(m.op, &m.name[..name_len]).expect("within NAME_MAX");
                built.id = m.id;
                built.slot = m.slot;
                built.parent = m.parent;
                built.farewell = m.farewell;
                assert_eq!(Message::decode(&built.encode()), Ok(built));
                assert_eq!(built, m);
                // The hello: only an OP_HELLO.
                let want = (m.op == OP_HELLO).then_some(m.slot);
                assert_eq!(Message::capacity_of_hello(&b), want);
            }
            Err(_) => assert_eq!(Message::capacity_of_hello(&b), None),
        }
        let too_long = [0u8; NAME_MAX + 1];
        assert!(Message::with_name(b[AT_OP], &too_long).is_none());
        // A pid message and a farewell as the host builds them read back.
        let pid = u32::from_ne_bytes([b[1], b[2], b[3], b[4]]);
        let mut p = Message::with_pid(OP_ADD_MEMBER, pid);
        let grace = std::time::Duration::from_millis(u64::from(u32_at(&b, AT_GRACE)));
        p.farewell = Farewell::new(i32::from(b[AT_SIGNAL]), grace);
        assert_eq!(Message::decode(&p.encode()), Ok(p));
        assert!(p.farewell.grace_ms <= GRACE_MAX_MS);
        // The control buffer: exactly as long as the rest (so a read past
        // it is a bounds failure, or ASan's report), `controllen` from
        // the byte after the datagram.
        let control = data.get(MSG_LEN + 1..).unwrap_or_default();
        let controllen = len.wrapping_mul(3) % 64;
        let fds: Vec<c_int> = received_fds(control, controllen).collect();
        let mut ok = control.len() >= CMSG_HDR && controllen >= CMSG_LEN1;
        let mut end = 0;
        if ok {
            let h = |i: usize| control[i];
            let hdr_len = u64::from_ne_bytes([h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7)]);
            let level = c_int::from_ne_bytes([h(8), h(9), h(10), h(11)]);
            let typ = c_int::from_ne_bytes([h(12), h(13), h(14), h(15)]);
            ok = level == SOL_SOCKET && typ == SCM_RIGHTS;
            let hdr_len = usize::try_from(hdr_len).unwrap_or(usize::MAX);
            end = hdr_len.min(controllen).min(control.len());
        }
        let want: Vec<c_int> = if ok && end > CMSG_HDR {
            control[CMSG_HDR..end]
                .chunks_exact(4)
                .map(|c| c_int::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        } else {
            Vec::new()
        };
        assert_eq!(fds, want);
        // What the host sends, the keeper reads: one descriptor.
        let fd = u32_at(&b, AT_SLOT) as c_int;
        let sent = rights_control(fd);
        let got: Vec<c_int> = received_fds(&sent, CONTROL_ONE).collect();
        assert_eq!(got, [fd]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(op: u8, id: u64, slot: u32, parent: u32, name: &[u8]) -> Message {
        let mut m = Message::with_name(op, name).unwrap();
        m.id = id;
        m.slot = slot;
        m.parent = parent;
        m
    }

    fn with_farewell(mut m: Message, signal: u8, grace_ms: u32) -> Message {
        m.farewell = Farewell { signal, grace_ms };
        m
    }

    /// Every kind of message survives the wire unchanged, at the edges of
    /// its fields, and its bytes are those encoded again.
    #[test]
    fn messages_round_trip() {
        let table = [
            named(OP_ADD, 1, 0, 7, b"run-1"),
            with_farewell(named(OP_ADD, 1, 0, 7, b"run-1"), 15, 2000),
            named(OP_DEL, u64::MAX, u32::MAX, 0, b""),
            named(OP_ADD_ROOT, 42, 3, 0, &4242u32.to_ne_bytes()),
            Message::with_pid(OP_ADD_ROOT, 4242),
            with_farewell(Message::with_pid(OP_ADD_ROOT, 1), SIGNAL_MAX, GRACE_MAX_MS),
            named(OP_ADD_MEMBER, 43, 4, 0, &1u32.to_ne_bytes()),
            with_farewell(
                named(OP_ADD_MEMBER, 43, 4, 0, &u32::MAX.to_ne_bytes()),
                1,
                1,
            ),
            named(OP_PARENT, 0, 9, 0, b""),
            named(OP_COOKIE, 5, 1 << 20, 0, &[b'c'; NAME_MAX]),
            // `-s 0`: nothing first, SIGKILL after the grace.
            with_farewell(named(OP_COOKIE, 5, 1, 0, b"1.x"), 0, 3000),
            named(OP_HELLO, 0, 1_048_576, 0, b""),
            named(OP_FAREWELL, 8, 3, 0, b""),
            with_farewell(named(OP_FAREWELL, 8, 3, 0, b""), 15, 100),
        ];
        for m in table {
            let b = m.encode();
            assert_eq!(b.len(), MSG_LEN);
            assert_eq!(b[0], VERSION);
            assert_eq!(b[AT_OP], m.op);
            assert_eq!(Message::decode(&b), Ok(m), "{m:?}");
            assert_eq!(Message::decode(&b).unwrap().encode(), b);
        }
    }

    /// The layout is the one both ends were built with: field offsets.
    #[test]
    fn layout_is_fixed() {
        let m = with_farewell(
            named(
                OP_ADD,
                0x0102_0304_0506_0708,
                0x1112_1314,
                0x2122_2324,
                b"ab",
            ),
            15,
            0x0000_1234,
        );
        let b = m.encode();
        assert_eq!(b[0], VERSION);
        assert_eq!(b[AT_OP], OP_ADD);
        assert_eq!(b[AT_SIGNAL], 15);
        assert_eq!(b[AT_ID..AT_ID + 8], 0x0102_0304_0506_0708u64.to_ne_bytes());
        assert_eq!(b[AT_SLOT..AT_SLOT + 4], 0x1112_1314u32.to_ne_bytes());
        assert_eq!(b[AT_PARENT..AT_PARENT + 4], 0x2122_2324u32.to_ne_bytes());
        assert_eq!(b[AT_GRACE..AT_GRACE + 4], 0x1234u32.to_ne_bytes());
        assert_eq!(b[AT_NAME_LEN], 2);
        assert_eq!(&b[AT_NAME..AT_NAME + 3], b"ab\0");
        assert_eq!(MSG_LEN, AT_NAME + NAME_MAX);
        assert_eq!(MSG_LEN, 88);
    }

    /// A name longer than the field is refused by the host; the keeper
    /// refuses a name length past it, or not the one the kind needs.
    #[test]
    fn names_are_bounded() {
        for (len, fits) in [
            (0, true),
            (1, true),
            (NAME_MAX, true),
            (NAME_MAX + 1, false),
        ] {
            assert_eq!(
                Message::with_name(OP_COOKIE, &vec![b'x'; len]).is_some(),
                fits,
                "{len}"
            );
        }
        let b = named(OP_ADD, 1, 0, 0, b"x").encode();
        for (op, len, ok) in [
            (OP_ADD, 0, false),
            (OP_ADD, 1, true),
            (OP_COOKIE, 0, false),
            (OP_ADD_ROOT, 3, false),
            (OP_ADD_ROOT, 5, false),
            (OP_ADD_MEMBER, 4, true),
            (OP_DEL, 1, false),
            (OP_PARENT, 1, false),
            (OP_HELLO, 1, false),
            (OP_FAREWELL, 1, false),
            (OP_FAREWELL, 0, true),
        ] {
            let mut c = b;
            c[AT_OP] = op;
            c[AT_NAME_LEN] = len;
            c[AT_NAME..].fill(0);
            c[AT_NAME..AT_NAME + len as usize].fill(b'x');
            let got = Message::decode(&c);
            assert_eq!(got.is_ok(), ok, "op {op} len {len}: {got:?}");
            if !ok {
                assert_eq!(got, Err(Invalid::NameLength), "op {op} len {len}");
            }
        }
        let mut c = b;
        c[AT_NAME_LEN] = 255;
        assert_eq!(Message::decode(&c), Err(Invalid::NameLength));
    }

    /// What the keeper refuses, and why: a wrong length or version, an
    /// unknown kind, bytes past the name, a NUL in a name, a farewell out
    /// of range or where no tree is registered.
    #[test]
    fn malformed_messages_are_refused() {
        let good = with_farewell(named(OP_COOKIE, 9, 1, 0, b"12.a"), 15, 500).encode();
        assert!(Message::decode(&good).is_ok());
        let edit = |f: &dyn Fn(&mut [u8; MSG_LEN])| {
            let mut b = good;
            f(&mut b);
            Message::decode(&b)
        };
        assert_eq!(Message::decode(&good[..MSG_LEN - 1]), Err(Invalid::Length));
        assert_eq!(Message::decode(&[]), Err(Invalid::Length));
        assert_eq!(
            Message::decode(&[good.as_slice(), &[0]].concat()),
            Err(Invalid::Length)
        );
        assert_eq!(edit(&|b| b[0] = 1), Err(Invalid::Version));
        assert_eq!(edit(&|b| b[0] = 0), Err(Invalid::Version));
        for op in [0, 9, 255] {
            assert_eq!(edit(&|b| b[AT_OP] = op), Err(Invalid::Op), "{op}");
        }
        assert_eq!(edit(&|b| b[AT_NAME + 10] = 1), Err(Invalid::Name));
        assert_eq!(edit(&|b| b[AT_NAME + 1] = 0), Err(Invalid::Name));
        assert_eq!(
            edit(&|b| b[AT_SIGNAL] = SIGNAL_MAX + 1),
            Err(Invalid::Signal)
        );
        assert_eq!(
            edit(&|b| b[AT_GRACE..AT_GRACE + 4].copy_from_slice(&0u32.to_ne_bytes())),
            Err(Invalid::Signal)
        );
        assert_eq!(
            edit(&|b| b[AT_GRACE..AT_GRACE + 4].copy_from_slice(&(GRACE_MAX_MS + 1).to_ne_bytes())),
            Err(Invalid::Grace)
        );
        // A farewell only on the adds of a tree.
        let mut del = with_farewell(Message::new(OP_DEL), 15, 500).encode();
        assert_eq!(Message::decode(&del), Err(Invalid::Farewell));
        del[AT_SIGNAL] = 0;
        del[AT_GRACE..AT_GRACE + 4].fill(0);
        assert!(Message::decode(&del).is_ok());
    }

    /// A run's farewell: its first signal and its grace, cut to the cap;
    /// no grace is SIGKILL at once; SIGKILL as the first signal (how `-s 0`
    /// reaches the library) is nothing first, SIGKILL after the grace.
    #[test]
    fn farewells_follow_the_run() {
        use std::time::Duration;
        let f = |sig: i32, ms: u64| {
            let f = Farewell::new(sig, Duration::from_millis(ms));
            (f.signal, f.grace_ms)
        };
        assert_eq!(f(15, 2000), (15, 2000));
        assert_eq!(f(15, 0), (0, 0));
        assert_eq!(f(2, 1), (2, 1));
        assert_eq!(f(15, 60_000), (15, GRACE_MAX_MS));
        assert_eq!(f(9, 3000), (0, 3000));
        assert_eq!(f(64, 10), (64, 10));
        assert_eq!(f(65, 10), (0, 10));
        assert_eq!(f(-1, 10), (0, 10));
        let f = Farewell::new(15, Duration::MAX);
        assert_eq!(f.grace_ms, GRACE_MAX_MS);
        // Every farewell made is one the keeper takes.
        for (sig, ms) in [(15, 2000), (9, 5), (0, 0), (34, 10_001)] {
            let mut m = Message::with_pid(OP_ADD_ROOT, 7);
            m.farewell = Farewell::new(sig, Duration::from_millis(ms));
            assert_eq!(Message::decode(&m.encode()), Ok(m));
        }
    }

    /// The keeper's first message gives its capacity; anything else (end
    /// of file, a short read, another kind) is not a hello.
    #[test]
    fn hello_is_read_only_from_a_hello() {
        let mut hello = Message::new(OP_HELLO);
        hello.slot = 1000;
        let b = hello.encode();
        let add = Message::new(OP_DEL).encode();
        let cases: [(&[u8], Option<u32>); 5] = [
            (&b, Some(1000)),
            (&b[..AT_SLOT + 4], None),
            (&b[..MSG_LEN - 1], None),
            (&[], None),
            (&add, None),
        ];
        for (buf, want) in cases {
            assert_eq!(Message::capacity_of_hello(buf), want, "n={}", buf.len());
        }
    }

    /// Descriptors come back from the control buffer the host builds, and
    /// from no other: a wrong level or type, a short length, a header
    /// length past the buffer.
    #[test]
    fn received_descriptors_are_parsed_within_bounds() {
        let mut buf = [0u8; 64];
        buf[..CONTROL_ONE].copy_from_slice(&rights_control(17));
        let got = |b: &[u8], n: usize| received_fds(b, n).collect::<Vec<_>>();
        assert_eq!(got(&buf, CONTROL_ONE), [17]);
        assert_eq!(got(&buf, CMSG_LEN1), [17]);
        assert_eq!(got(&buf, CMSG_LEN1 - 1), Vec::<c_int>::new());
        assert_eq!(got(&buf, 0), Vec::<c_int>::new());
        // Two descriptors in one message (the host never sends that; the
        // keeper must see both to close the second).
        let mut two = buf;
        two[0..8].copy_from_slice(&((CMSG_HDR + 8) as u64).to_ne_bytes());
        two[20..24].copy_from_slice(&18i32.to_ne_bytes());
        assert_eq!(got(&two, 24), [17, 18]);
        assert_eq!(got(&two, 20), [17]);
        // A header length past the buffer reads no further than it.
        let mut huge = buf;
        huge[0..8].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert_eq!(got(&huge[..CMSG_LEN1], CONTROL_ONE), [17]);
        let mut level = buf;
        level[8] = 2;
        assert_eq!(got(&level, CONTROL_ONE), Vec::<c_int>::new());
        let mut typ = buf;
        typ[12] = 2;
        assert_eq!(got(&typ, CONTROL_ONE), Vec::<c_int>::new());
    }
}
