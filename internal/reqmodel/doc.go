// Package reqmodel reads the model that a JSON request body names: the
// "model" field by which Governor picks a call's lane.
//
// Of returns what json.Unmarshal into struct{ Model string } would: the
// value of the last top-level key that matches "model" case-insensitively;
// empty if there is none, if it is not a string, or if the body is not a
// valid JSON object. It keeps nothing of the body it reads and is safe for
// concurrent use.
//
// Of reads the body once, without decoding it, so that a request with a
// long prompt costs little more to route than a short one.
package reqmodel
