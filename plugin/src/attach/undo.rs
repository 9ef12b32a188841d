//! The undo stack of an ADD: each change pushes how to take it back; on failure the steps are
//! taken back newest first, so that nothing is removed while something built on it still stands
//! (rules before the link they route through, the link before the IPAM allocation it carried).

#[derive(Debug)]
pub struct UndoStack<T> {
    steps: Vec<T>,
}

impl<T> Default for UndoStack<T> {
    fn default() -> Self {
        UndoStack { steps: Vec::new() }
    }
}

impl<T> UndoStack<T> {
    pub fn push(&mut self, step: T) {
        self.steps.push(step);
    }

    /// The steps in the order they must be undone: newest first.
    pub fn unwind(self) -> impl Iterator<Item = T> {
        self.steps.into_iter().rev()
    }

    /// The steps, oldest first, without taking them.
    pub fn steps(&self) -> impl Iterator<Item = &T> {
        self.steps.iter()
    }

    pub fn len(&self) -> usize {
        self.steps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwinds_newest_first() {
        let mut undo = UndoStack::default();
        for step in ["link", "ipam", "sysctl", "rule"] {
            undo.push(step);
        }
        assert_eq!(undo.len(), 4);
        let order: Vec<_> = undo.unwind().collect();
        assert_eq!(order, ["rule", "sysctl", "ipam", "link"]);
    }
}
