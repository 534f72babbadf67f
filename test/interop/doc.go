// Package interop checks Ankusa's signature verification and its outgoing
// signature against the providers' own libraries (stripe-go,
// standard-webhooks, svix, twilio-go, slack-go, go-github). It is its own
// module so that those libraries never become dependencies of the binary.
package interop
