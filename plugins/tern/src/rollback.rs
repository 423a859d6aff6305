//! The undo stack of ADD: push an undo step right after each thing is
//! created; `commit` on success; otherwise the steps run in reverse when the stack is dropped —
//! on an error return and on a panic alike.

/// One undo step: a description for the log and the action.
type Step<'a> = (String, Box<dyn FnOnce() -> Result<(), String> + 'a>);

/// Undo steps, run in reverse unless committed.
#[derive(Default)]
pub struct Rollback<'a> {
    steps: Vec<Step<'a>>,
}

impl<'a> Rollback<'a> {
    /// An empty stack.
    pub fn new() -> Self {
        Rollback { steps: Vec::new() }
    }

    /// Pushes an undo step for something just created.
    pub fn push(
        &mut self,
        what: impl Into<String>,
        undo: impl FnOnce() -> Result<(), String> + 'a,
    ) {
        self.steps.push((what.into(), Box::new(undo)));
    }

    /// Keeps everything: the steps are dropped without running.
    pub fn commit(mut self) {
        self.steps.clear();
    }
}

impl Drop for Rollback<'_> {
    fn drop(&mut self) {
        while let Some((what, undo)) = self.steps.pop() {
            match undo() {
                Ok(()) => tracing::debug!(step = %what, "rolled back"),
                Err(e) => tracing::warn!(step = %what, error = %e, "rollback step failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn unwinds_in_reverse_unless_committed() {
        let log = RefCell::new(Vec::new());
        {
            let mut rb = Rollback::new();
            rb.push("a", || {
                log.borrow_mut().push("a");
                Ok(())
            });
            rb.push("b", || {
                log.borrow_mut().push("b");
                Err("boom".into())
            });
            rb.push("c", || {
                log.borrow_mut().push("c");
                Ok(())
            });
        }
        assert_eq!(
            *log.borrow(),
            vec!["c", "b", "a"],
            "a failing step does not stop the rest"
        );
        log.borrow_mut().clear();
        let mut rb = Rollback::new();
        rb.push("x", || {
            log.borrow_mut().push("x");
            Ok(())
        });
        rb.commit();
        assert!(log.borrow().is_empty());
    }
}
