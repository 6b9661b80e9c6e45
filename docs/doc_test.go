// Package docs holds no code: its tests check that the repository's map
// of itself stays true — docs/architecture.md names every file, the
// counts written in the prose match the code, and the engine's files stay
// layered.
package docs
