// The step's stages in time order, a fixed index space shared by policy decisions and the
// MILP (which cannot know the plan-dependent RC windows in advance):
//   P0, P1, F0..F{L-1}, HEAD, backward slot L-1 .. backward slot 0, E.
// Backward slot j holds B{j} and, when j is the top layer of a recompute block (s, j+1),
// the block's RC windows just before it. Activation transfers, weight loads and gradient
// drains assigned to a slot (plan_decisions.h) run in its B{j} window.
#pragma once

namespace lt {

struct Stages {
  int L = 0;
  int p0() const { return 0; }
  int p1() const { return 1; }
  int forward(int j) const { return 2 + j; }
  int head() const { return L + 2; }
  int backward(int j) const { return L + 3 + (L - 1 - j); }
  int epilogue() const { return 2 * L + 3; }
  int count() const { return 2 * L + 4; }
  bool is_backward(int s) const { return s > head() && s < epilogue(); }
  int backward_layer(int s) const { return L - 1 - (s - L - 3); }
};

}  // namespace lt
