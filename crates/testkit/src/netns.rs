//! Throwaway network namespaces: a fake host and pod netns per test.
