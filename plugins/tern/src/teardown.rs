//! The error collector of DEL and GC: teardown runs every step even when one fails, then reports
//! one CNI error. Rule: the first failure's code and message; its details, then every later
//! failure's message and details, joined with "; " in the order they happened.

use tern_cni::Error;

/// Failures of a teardown, in the order they happened.
#[derive(Debug, Default)]
pub struct Teardown {
    errors: Vec<Error>,
}

impl Teardown {
    /// An empty collector.
    pub fn new() -> Teardown {
        Teardown::default()
    }

    /// Records a failure; the teardown goes on.
    pub fn push(&mut self, e: Error) {
        self.errors.push(e);
    }

    /// Records `r`'s failure, if any, and returns its value otherwise.
    pub fn record<T>(&mut self, r: Result<T, Error>) -> Option<T> {
        r.map_err(|e| self.push(e)).ok()
    }

    /// `Ok` when nothing failed; otherwise the first failure with every other one appended to its
    /// details (see the module doc).
    ///
    /// # Errors
    /// The combined error, carrying the first failure's code.
    pub fn finish(self) -> Result<(), Error> {
        let mut errors = self.errors.into_iter();
        let Some(first) = errors.next() else {
            return Ok(());
        };
        let mut details: Vec<String> = Vec::new();
        if !first.details.is_empty() {
            details.push(first.details.clone());
        }
        details.extend(errors.map(|e| e.to_string()));
        if details.is_empty() {
            return Err(first);
        }
        Err(first.with_details(details.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_cni::code;

    #[test]
    fn nothing_failed_is_ok() {
        assert!(Teardown::new().finish().is_ok());
    }

    #[test]
    fn one_failure_is_returned_as_it_is() {
        let mut t = Teardown::new();
        t.push(Error::new(code::NETLINK, "delete veth").with_details("errno 16"));
        let e = t.finish().unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str(), e.details.as_str()),
            (code::NETLINK, "delete veth", "errno 16")
        );
    }

    #[test]
    fn first_code_and_every_message_kept() {
        let mut t = Teardown::new();
        assert_eq!(t.record(Ok::<u8, Error>(3)), Some(3));
        t.record::<()>(Err(
            Error::new(50, "ipam gone").with_details("not in CNI_PATH")
        ));
        t.push(Error::new(code::NETLINK, "delete veth"));
        t.push(Error::new(code::STATE_IO, "remove state").with_details("EROFS"));
        let e = t.finish().unwrap_err();
        assert_eq!(e.code, 50);
        assert_eq!(e.msg, "ipam gone");
        assert_eq!(
            e.details,
            "not in CNI_PATH; delete veth; remove state; EROFS"
        );
    }

    #[test]
    fn first_without_details_still_lists_the_rest() {
        let mut t = Teardown::new();
        t.push(Error::new(code::NETLINK, "delete a"));
        t.push(Error::new(code::NETLINK, "delete b"));
        let e = t.finish().unwrap_err();
        assert_eq!(
            (e.msg.as_str(), e.details.as_str()),
            ("delete a", "delete b")
        );
    }
}
