"""Serving what-ifs on a real model: ``serve()`` (``wb.serve``), its result, and the iteration
costs measured by running the model timing-only. The request-level simulation itself
(arrivals, schedulers, paged KV cache, metrics) is ``backend.sim.serving``; its request
builders are re-exported here for notebooks."""
from backend.sim.serving import (SLO, Request, SchedulerConfig, audio_windows, gamma_requests, poisson_requests,
                                 speech_requests, trace_requests)
from workbench.serving.encoder_decoder import EncoderDecoderCosts
from workbench.serving.iteration_costs import IterationCosts
from workbench.serving.service import ServingResult, serve
from workbench.serving.sweep import cheapest, serve_sweep

__all__ = ["serve", "ServingResult", "serve_sweep", "cheapest", "IterationCosts", "EncoderDecoderCosts",
           "SchedulerConfig", "SLO", "Request", "poisson_requests", "gamma_requests", "trace_requests",
           "speech_requests", "audio_windows"]
