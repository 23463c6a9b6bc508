//! `LiveBlocks`: the blocks a resource has out, by address, so a free can be checked.
//!
//! It sits on every allocation and free of a pool, so it is a plain open-addressing table
//! (linear probing, deletion by shifting later entries back, no tombstones): an insert and a
//! remove cost a few nanoseconds, where the standard map took several times the pool's own
//! work. Addresses are never 0, which marks an empty slot.

/// Odd, with bits spread: multiplying by it mixes every address bit into the top bits, which
/// pick the slot (addresses share their low bits: blocks are aligned).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;
const FIRST_SLOTS: usize = 16;

#[derive(Debug)]
pub(super) struct LiveBlocks<V: Copy> {
    /// (address, value); address 0: empty. The length is a power of two.
    slots: Vec<(usize, V)>,
    /// 64 − log2(slots), so a hash's top bits index the table.
    shift: u32,
    len: usize,
    /// What empty slots hold beside address 0.
    filler: V,
}

impl<V: Copy> LiveBlocks<V> {
    pub(super) fn new(filler: V) -> Self {
        LiveBlocks {
            slots: vec![(0, filler); FIRST_SLOTS],
            shift: 64 - FIRST_SLOTS.trailing_zeros(),
            len: 0,
            filler,
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    #[inline]
    fn home(&self, address: usize) -> usize {
        ((address as u64).wrapping_mul(MIX) >> self.shift) as usize
    }

    /// The slot holding `address`, if any.
    #[inline]
    fn find(&self, address: usize) -> Option<usize> {
        let mut at = self.home(address);
        loop {
            match self.slots[at].0 {
                0 => return None,
                a if a == address => return Some(at),
                _ => at = (at + 1) & self.mask(),
            }
        }
    }

    /// Records `address` (never 0) with `value`, replacing what it had.
    #[inline]
    pub(super) fn insert(&mut self, address: usize, value: V) {
        debug_assert_ne!(address, 0, "address 0 marks an empty slot");
        // At most half full, so probe runs stay short.
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mut at = self.home(address);
        loop {
            match self.slots[at].0 {
                0 => {
                    self.slots[at] = (address, value);
                    self.len += 1;
                    return;
                }
                a if a == address => {
                    self.slots[at].1 = value;
                    return;
                }
                _ => at = (at + 1) & self.mask(),
            }
        }
    }

    #[cold]
    fn grow(&mut self) {
        let doubled = vec![(0, self.filler); self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        self.shift -= 1;
        self.len = 0;
        for (address, value) in old.into_iter().filter(|&(a, _)| a != 0) {
            self.insert(address, value);
        }
    }

    /// Takes `address`'s record out, if it has one.
    #[inline]
    pub(super) fn remove(&mut self, address: usize) -> Option<V> {
        let mut hole = self.find(address)?;
        let value = self.slots[hole].1;
        let mask = self.mask();
        // Later entries of the run move back into the hole when their home slot is not after
        // it, so every entry stays reachable from its home without tombstones.
        let mut next = (hole + 1) & mask;
        while self.slots[next].0 != 0 {
            let home = self.home(self.slots[next].0);
            if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
                self.slots[hole] = self.slots[next];
                hole = next;
            }
            next = (next + 1) & mask;
        }
        self.slots[hole] = (0, self.filler);
        self.len -= 1;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::LiveBlocks;

    #[test]
    fn records_replace_and_come_out_once() {
        let mut live = LiveBlocks::new(0u32);
        live.insert(0x1000, 1);
        live.insert(0x1100, 2);
        live.insert(0x1000, 3);
        assert_eq!(live.len(), 2);
        assert_eq!(live.remove(0x1000), Some(3));
        assert_eq!(live.remove(0x1000), None, "a second remove finds nothing");
        assert_eq!(live.remove(0x9999), None);
        assert_eq!(live.remove(0x1100), Some(2));
        assert_eq!(live.len(), 0);
    }

    /// Many entries, removed in an order unlike the inserts', checked against a map after
    /// every step: growth and the backward shifts keep every entry reachable.
    #[test]
    fn agrees_with_a_map_through_growth_and_removals() {
        let mut live = LiveBlocks::new(0usize);
        let mut map = HashMap::new();
        let n = if cfg!(miri) { 300 } else { 20_000 };
        let address = |i: usize| 0x7f00_0000_0000 + i * 256;
        for i in 0..n {
            live.insert(address(i), i);
            map.insert(address(i), i);
        }
        for i in (0..n).step_by(3).chain((1..n).step_by(3)) {
            assert_eq!(live.remove(address(i)), map.remove(&address(i)));
            if i % 97 == 0 {
                for (&a, &v) in &map {
                    assert_eq!(live.find(a).map(|at| live.slots[at].1), Some(v));
                }
            }
        }
        assert_eq!(live.len(), map.len());
        for (&a, &v) in &map {
            assert_eq!(live.remove(a), Some(v));
        }
        assert_eq!(live.len(), 0);
    }
}
