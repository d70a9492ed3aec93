"""Controllers: metadata records, controller logic and the metadata image (issue: metadata quorum)."""
