package jetstream

// SubjectMatches exposes the stream-subject match Verify uses.
var SubjectMatches = subjectMatches
