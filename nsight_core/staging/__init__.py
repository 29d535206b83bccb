"""The parts of a staged request (`nsight_core.stages` runs them): the two stages' requests,
the ranking after the screen, the budget, whether a screen can pay at all (`cost`), and the
one result made of both stages."""
