"""Pure tensor functions for every objective of deciplane (docs/methods.md §1–5).

This package imports only torch, numpy, the standard library and ``deciplane.errors``
(``tests/test_layering.py`` enforces it). Variants are chosen by typed options that map
to functions (``ADVANTAGE_ESTIMATORS``, ``AGGREGATIONS``, ``RATIOS``, ``KL_ESTIMATORS``,
``BIAS_TERMS``, ``PROJECTION_RULES``), never by string if/elif chains in a trainer.

advantages (§4, exact)
    grpo_advantages, dr_grpo_advantages, rloo_advantages, reinforce_pp_advantages,
    compute_advantages + AdvantageConfig, gae, degenerate_groups, is_degenerate_batch,
    gigpo_advantages (+ discounted_returns, step_group_advantages, step_group_share)
policy_loss (§4, exact)
    token_ratio, gspo_sequence_ratio, gspo_token_ratio, clipped_surrogate, clip_fraction,
    aggregate (token_mean | seq_mean | seq_sum_const), aggregation_weights, kl_k1, kl_k2, kl_k3,
    policy_loss + PolicyLossConfig, LossOutput
rlid (§1, exact)
    menu_log_softmax, decision_ppo_loss, length_balanced_weights,
    weighted_mean, menu_marginal_kl, decision_entropy, rlid_loss + RLiDLossConfig
tlm_dre (§2, paper-inspired, parameters ours)
    turn_confidence, turn_weights, token_turn_weights, asymmetric_token_loss,
    turn_mean_aggregate, tlm_dre_loss + TLMDRELossConfig
cord (§3, exact)
    cord_combine, project_out, cord_stats, CordGradBuffers, CORDLossConfig
ttpo (§5.2, exact formulas; percentile/normalisation scope ours)
    ttpo_token_weights, normalized_entropy, opsd_loss, confident_error_scores,
    median_mask, negative_branch_loss, agree_branch_kl, ttpo_loss + TTPOLossConfig
tasco (§5.3, paper-inspired, parameters ours)
    mean_entropy, consistency_kl, tasco_loss, random_perturbation, sam_perturbation,
    TASCOLossConfig
erpo (§5.4, paper-inspired, parameters ours)
    probe_consensus, rank_mask, erpo_advantages, entropy_ceiling, erpo_loss + ERPOLossConfig
distill (menu and token distillation / behaviour cloning)
    expert_distill_loss, policy_distill_loss, token_nll
value (the critic of advantage=gae)
    value_loss
common
    masked_mean, masked_sum, masked_quantile, group_ids_from_keys, gather_log_probs,
    entropy_from_logits, kl_from_logits
"""

from __future__ import annotations

from .advantages import (ADVANTAGE_ESTIMATORS, AdvantageConfig, compute_advantages,
                         degenerate_groups, discounted_returns, dr_grpo_advantages, gae,
                         gigpo_advantages, grpo_advantages, is_degenerate_batch,
                         reinforce_pp_advantages, rloo_advantages, step_group_advantages,
                         step_group_ids, step_group_share, varied_group_share)
from deciplane._moved import renamed_names

from .common import (entropy_from_logits, gather_log_probs, group_ids_from_keys,
                     kl_from_logits, masked_mean, masked_minmax_normalize, masked_quantile,
                     masked_sum)
from .cord import (PROJECTION_RULES, CordGradBuffers, CORDLossConfig, cord_combine, cord_stats,
                   project_out)
from .distill import expert_distill_loss, policy_distill_loss, token_nll
from .erpo import (ERPOLossConfig, entropy_ceiling, erpo_advantages, erpo_loss, probe_consensus,
                   rank_mask, rank_threshold)
from .policy_loss import (AGGREGATIONS, KL_ESTIMATORS, RATIOS, LossOutput, PolicyLossConfig,
                          aggregate, aggregation_share, aggregation_weights, clip_fraction, clipped_surrogate, gspo_sequence_ratio,
                          gspo_token_ratio, kl_k1, kl_k2, kl_k3, policy_loss, seq_mean,
                          seq_sum_const, token_mean, token_ratio)
from .rlid import (BIAS_TERMS, RLiDLossConfig, decision_entropy,
                   decision_ppo_loss, length_balanced_weights, menu_log_softmax,
                   menu_marginal_kl, rlid_loss, weighted_mean)
from .value import value_loss
from .tasco import (TASCOLossConfig, consistency_kl, mean_entropy, random_perturbation,
                    sam_perturbation, tasco_loss)
from .tlm_dre import (TLMDRELossConfig, asymmetric_token_loss, check_turn_ids, tlm_dre_loss,
                      token_turn_weights, turn_confidence, turn_mean_aggregate, turn_weights)
from .ttpo import (TTPOLossConfig, agree_branch_kl, clip_at_quantile, confident_error_scores, median_mask,
                   negative_branch_loss, normalized_entropy, opsd_loss, ttpo_loss,
                   ttpo_token_weights)

__all__ = [
    # advantages
    "ADVANTAGE_ESTIMATORS", "AdvantageConfig", "compute_advantages", "degenerate_groups",
    "dr_grpo_advantages", "gae", "grpo_advantages", "is_degenerate_batch", "varied_group_share",
    "reinforce_pp_advantages", "rloo_advantages", "discounted_returns", "gigpo_advantages",
    "step_group_advantages", "step_group_ids", "step_group_share",
    # common
    "entropy_from_logits", "gather_log_probs", "group_ids_from_keys", "kl_from_logits",
    "masked_mean", "masked_minmax_normalize", "masked_quantile", "masked_sum",
    # cord
    "PROJECTION_RULES", "CordGradBuffers", "CORDLossConfig", "cord_combine", "cord_stats",
    "project_out",
    # distill, value
    "expert_distill_loss", "policy_distill_loss", "token_nll", "value_loss",
    # erpo
    "ERPOLossConfig", "entropy_ceiling", "erpo_advantages", "erpo_loss", "probe_consensus",
    "rank_mask", "rank_threshold",
    # policy loss
    "AGGREGATIONS", "KL_ESTIMATORS", "RATIOS", "LossOutput", "PolicyLossConfig", "aggregate",
    "aggregation_share", "aggregation_weights",
    "clip_fraction", "clipped_surrogate", "gspo_sequence_ratio", "gspo_token_ratio", "kl_k1",
    "kl_k2", "kl_k3", "policy_loss", "seq_mean", "seq_sum_const", "token_mean", "token_ratio",
    # rlid
    "BIAS_TERMS", "RLiDLossConfig", "decision_entropy",
    "decision_ppo_loss", "length_balanced_weights", "menu_log_softmax", "menu_marginal_kl",
    "rlid_loss", "weighted_mean",
    # tasco
    "TASCOLossConfig", "consistency_kl", "mean_entropy", "random_perturbation",
    "sam_perturbation", "tasco_loss",
    # tlm-dre
    "TLMDRELossConfig", "asymmetric_token_loss", "check_turn_ids", "tlm_dre_loss",
    "token_turn_weights", "turn_confidence", "turn_mean_aggregate", "turn_weights",
    # ttpo
    "TTPOLossConfig", "agree_branch_kl", "clip_at_quantile", "confident_error_scores", "median_mask",
    "negative_branch_loss", "normalized_entropy", "opsd_loss", "ttpo_loss",
    "ttpo_token_weights",
]


__getattr__ = renamed_names(__name__)
