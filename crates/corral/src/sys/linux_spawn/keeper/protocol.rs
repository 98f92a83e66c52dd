//! The keeper's messages: the layout both sides read and write (one
//! fixed-size `SOCK_SEQPACKET` datagram each, descriptors in `SCM_RIGHTS`).

use std::os::raw::c_int;

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
/// op, id (8 bytes), slot (4), parent slot (4), name length, name.
pub(super) const MSG_LEN: usize = 1 + 8 + 4 + 4 + 1 + NAME_MAX;
pub(super) const AT_ID: usize = 1;
pub(super) const AT_SLOT: usize = 9;
pub(super) const AT_PARENT: usize = 13;
pub(super) const AT_NAME_LEN: usize = 17;
pub(super) const AT_NAME: usize = 18;

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

/// One message, host to keeper (or the keeper's first, [`OP_HELLO`], with
/// its capacity in `slot`), decoded. `name` holds `name_len` bytes (a
/// cgroup's name, a tree's cookie, or a pid in 4 native-endian bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Message {
    pub(super) op: u8,
    pub(super) id: u64,
    pub(super) slot: u32,
    pub(super) parent: u32,
    pub(super) name_len: u8,
    pub(super) name: [u8; NAME_MAX],
}

impl Message {
    /// A message of kind `op`, every other field zero.
    pub(super) const fn new(op: u8) -> Message {
        Message {
            op,
            id: 0,
            slot: 0,
            parent: 0,
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

    /// The bytes on the wire: op, id (8 bytes), slot (4), parent slot (4),
    /// name length, name (native endian: both ends are one machine).
    pub(super) fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        b[0] = self.op;
        b[AT_ID..AT_ID + 8].copy_from_slice(&self.id.to_ne_bytes());
        b[AT_SLOT..AT_SLOT + 4].copy_from_slice(&self.slot.to_ne_bytes());
        b[AT_PARENT..AT_PARENT + 4].copy_from_slice(&self.parent.to_ne_bytes());
        b[AT_NAME_LEN] = self.name_len;
        b[AT_NAME..].copy_from_slice(&self.name);
        b
    }

    /// Reads a message back (no allocation, no panic: the keeper calls it).
    /// A name length past [`NAME_MAX`] is taken as [`NAME_MAX`].
    pub(super) fn decode(b: &[u8; MSG_LEN]) -> Message {
        let mut name = [0u8; NAME_MAX];
        let mut j = 0;
        while j < NAME_MAX {
            name[j] = b[AT_NAME + j];
            j += 1;
        }
        Message {
            op: b[0],
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
            slot: u32::from_ne_bytes([b[AT_SLOT], b[AT_SLOT + 1], b[AT_SLOT + 2], b[AT_SLOT + 3]]),
            parent: u32::from_ne_bytes([
                b[AT_PARENT],
                b[AT_PARENT + 1],
                b[AT_PARENT + 2],
                b[AT_PARENT + 3],
            ]),
            name_len: if b[AT_NAME_LEN] as usize > NAME_MAX {
                NAME_MAX as u8
            } else {
                b[AT_NAME_LEN]
            },
            name,
        }
    }

    /// The keeper's capacity from its first message, `n` bytes long: `None`
    /// if it is not one (the keeper ended before it was ready).
    pub(super) fn capacity_of_hello(b: &[u8; MSG_LEN], n: usize) -> Option<u32> {
        (n >= AT_SLOT + 4 && b[0] == OP_HELLO).then(|| Message::decode(b).slot)
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
        // decode ∘ encode ∘ decode = decode; encode ∘ decode = id but for
        // a name length past NAME_MAX, which reads as NAME_MAX.
        let m = Message::decode(&b);
        let wire = m.encode();
        assert_eq!(Message::decode(&wire), m);
        let mut clamped = b;
        clamped[AT_NAME_LEN] = clamped[AT_NAME_LEN].min(NAME_MAX as u8);
        assert_eq!(wire, clamped);
        // Built from its parts, a message reads back as built.
        let name_len = usize::from(m.name_len);
        let built = Message::with_name(m.op, &m.name[..name_len]).expect("within NAME_MAX");
        let mut built = built;
        built.id = m.id;
        built.slot = m.slot;
        built.parent = m.parent;
        assert_eq!(Message::decode(&built.encode()), built);
        assert_eq!(&built.name[..name_len], &m.name[..name_len]);
        assert!(built.name[name_len..].iter().all(|&x| x == 0));
        let too_long = [0u8; NAME_MAX + 1];
        assert!(Message::with_name(m.op, &too_long).is_none());
        let pid = u32::from_ne_bytes([b[1], b[2], b[3], b[4]]);
        let p = Message::decode(&Message::with_pid(m.op, pid).encode());
        assert_eq!((p.name_len, &p.name[..4]), (4, &pid.to_ne_bytes()[..]));
        // The hello: only an OP_HELLO long enough to hold its slot.
        let len = usize::from(data.get(MSG_LEN).copied().unwrap_or(0));
        let hello = Message::capacity_of_hello(&b, len);
        let want = (len >= AT_SLOT + 4 && b[0] == OP_HELLO).then_some(m.slot);
        assert_eq!(hello, want);
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
        let fd = m.slot as c_int;
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

    /// Every kind of message survives the wire unchanged, at the edges of
    /// its fields.
    #[test]
    fn messages_round_trip() {
        let table = [
            named(OP_ADD, 1, 0, 7, b"run-1"),
            named(OP_DEL, u64::MAX, u32::MAX, 0, b""),
            named(OP_ADD_ROOT, 42, 3, 0, &4242u32.to_ne_bytes()),
            Message::with_pid(OP_ADD_ROOT, 4242),
            named(OP_ADD_MEMBER, 43, 4, 0, &1u32.to_ne_bytes()),
            named(OP_PARENT, 0, 9, 0, b""),
            named(OP_COOKIE, 5, 1 << 20, 0, &[b'c'; NAME_MAX]),
            named(OP_HELLO, 0, 1_048_576, 0, b""),
        ];
        for m in table {
            let b = m.encode();
            assert_eq!(b.len(), MSG_LEN);
            assert_eq!(b[0], m.op);
            assert_eq!(Message::decode(&b), m, "{m:?}");
        }
    }

    /// The layout is the one both ends were built with: field offsets.
    #[test]
    fn layout_is_fixed() {
        let b = named(
            OP_ADD,
            0x0102_0304_0506_0708,
            0x1112_1314,
            0x2122_2324,
            b"ab",
        )
        .encode();
        assert_eq!(b[AT_ID..AT_ID + 8], 0x0102_0304_0506_0708u64.to_ne_bytes());
        assert_eq!(b[AT_SLOT..AT_SLOT + 4], 0x1112_1314u32.to_ne_bytes());
        assert_eq!(b[AT_PARENT..AT_PARENT + 4], 0x2122_2324u32.to_ne_bytes());
        assert_eq!(b[AT_NAME_LEN], 2);
        assert_eq!(&b[AT_NAME..AT_NAME + 3], b"ab\0");
        assert_eq!(MSG_LEN, AT_NAME + NAME_MAX);
    }

    /// A name longer than the field is refused by the host, and a length
    /// byte past it is clamped by the keeper.
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
        let mut b = Message::new(OP_ADD).encode();
        b[AT_NAME_LEN] = 255;
        assert_eq!(Message::decode(&b).name_len as usize, NAME_MAX);
    }

    /// The keeper's first message gives its capacity; anything else (end
    /// of file, a short read, another kind) is not a hello.
    #[test]
    fn hello_is_read_only_from_a_hello() {
        let mut hello = Message::new(OP_HELLO);
        hello.slot = 1000;
        let b = hello.encode();
        let cases: [(&[u8; MSG_LEN], usize, Option<u32>); 5] = [
            (&b, MSG_LEN, Some(1000)),
            (&b, AT_SLOT + 4, Some(1000)),
            (&b, AT_SLOT + 3, None),
            (&b, 0, None),
            (&Message::new(OP_ADD).encode(), MSG_LEN, None),
        ];
        for (buf, n, want) in cases {
            assert_eq!(Message::capacity_of_hello(buf, n), want, "n={n}");
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
